// `frugal prepare`: read and validate the inputs, tokenize, split, write shards + the tokenizer file;
// and opening a prepared directory with its shards checked against its tokenizer.
#include "frugal/data/prepare.h"

#include <filesystem>

#include "frugal/core/error.h"
#include "frugal/core/timer.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "frugal/io/atomic_file.h"

namespace frugal::data {
namespace {

std::vector<std::string> read_inputs(const std::vector<std::string>& paths, int64_t& bytes) {
  std::vector<std::string> texts;
  for (const std::string& path : paths) {
    texts.push_back(read_text_file(path));
    check_utf8(texts.back(), "input file '" + path + "'");
    bytes += static_cast<int64_t>(texts.back().size());
  }
  return texts;
}

// Tokens of the texts in order; gpt2 separates consecutive texts with its end-of-text token.
std::vector<int32_t> encode_all(const Tokenizer& tok, const std::vector<std::string>& texts) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0 && tok.eot_token() >= 0) out.push_back(tok.eot_token());
    const std::vector<int32_t> ids = tok.encode(texts[i]);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace

PrepareResult prepare(const PrepareOptions& o) {
  FRUGAL_CHECK(!o.inputs.empty(), "no input files; pass at least one --input FILE");
  FRUGAL_CHECK(!o.out_dir.empty(), "no output directory; pass --out DIR");
  FRUGAL_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction {} must be in [0, 1)", o.val_fraction);
  FRUGAL_CHECK(o.val_fraction > 0 || !o.val_inputs.empty(), "--val-fraction 0 without --val-input "
               "leaves val.bin empty, and training evaluates on it; give a fraction in (0, 1) or "
               "validation files with --val-input FILE");
  Timer total;
  PrepareResult r;
  const std::vector<std::string> train_texts = read_inputs(o.inputs, r.input_bytes);
  FRUGAL_CHECK(r.input_bytes > 0, "the --input files are empty; give text to tokenize");
  const std::vector<std::string> val_texts = read_inputs(o.val_inputs, r.input_bytes);

  std::unique_ptr<Tokenizer> tok;
  if (o.tokenizer == "char") {
    std::string all;
    for (const auto* texts : {&train_texts, &val_texts})
      for (const std::string& t : *texts) all += t;
    tok = std::make_unique<CharTokenizer>(CharTokenizer::from_text(all));
  } else {
    tok = load_tokenizer(o.tokenizer, {.allow_special = o.special_eot, .threads = o.threads});
  }

  Timer encode;
  std::vector<int32_t> train = encode_all(*tok, train_texts);
  std::vector<int32_t> val = encode_all(*tok, val_texts);
  r.encode_seconds = encode.seconds();
  if (o.val_inputs.empty()) {
    const auto n_val = static_cast<size_t>(static_cast<double>(train.size()) * o.val_fraction);
    val.assign(train.end() - static_cast<std::ptrdiff_t>(n_val), train.end());
    train.resize(train.size() - n_val);
  }
  // A sample is a token and the next one to predict: a shorter shard has none.
  FRUGAL_CHECK(train.size() >= 2, "train.bin would hold {} token(s), but a shard needs at least 2 "
               "(a token and the next one to predict) and training needs more than train.seq_len; "
               "give more --input text", train.size());
  FRUGAL_CHECK(val.size() >= 2, "val.bin would hold {} token(s), but a shard needs at least 2 (a "
               "token and the next one to predict); {}", val.size(), o.val_inputs.empty()
                   ? "give more --input text or a larger --val-fraction"
                   : "give more --val-input text");

  io::create_directories(o.out_dir, "the output directory (--out)");
  write_shard(o.out_dir + "/train.bin", train, tok->vocab_size());
  write_shard(o.out_dir + "/val.bin", val, tok->vocab_size());
  io::write_file_atomic((std::filesystem::path(o.out_dir) / kTokenizerFile).string(), tok->to_json() + "\n");

  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  r.vocab_size = tok->vocab_size();
  r.total_seconds = total.seconds();
  return r;
}

std::unique_ptr<Tokenizer> load_prepared_tokenizer(const std::string& dir) {
  const std::string path = tokenizer_file(dir);
  FRUGAL_CHECK(std::filesystem::exists(path), "{} not found; the data directory must be one made "
               "by `frugal prepare --out {}`", path, dir);
  return load_tokenizer_json(path);
}

std::shared_ptr<const TokenShard> open_prepared_split(const std::string& dir, const std::string& split,
                                                      const Tokenizer& tokenizer) {
  const std::string path = (std::filesystem::path(dir) / (split + ".bin")).string();
  FRUGAL_CHECK(std::filesystem::exists(path), "data file {} not found; create it with `frugal "
               "prepare --out {}` or point at a directory made by `frugal prepare`", path, dir);
  auto shard = std::make_shared<const TokenShard>(TokenShard::open(path));
  FRUGAL_CHECK(shard->vocab_size() == tokenizer.vocab_size(), "{} holds ids of a {}-token "
               "vocabulary but {} has {} tokens: they come from different `frugal prepare` runs; "
               "prepare the directory again", path, shard->vocab_size(), tokenizer_file(dir),
               tokenizer.vocab_size());
  return shard;
}

}  // namespace frugal::data
