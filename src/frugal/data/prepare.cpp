// `frugal prepare`: stream the corpus in units, encode batches of units on all threads (a reader
// thread keeps the next batch coming), write the tokens in order into shard files, then the
// tokenizer file and, last, manifest.json. Also opening a prepared directory's splits.
#include "frugal/data/prepare.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <fmt/format.h>

#include "frugal/core/error.h"
#include "frugal/core/timer.h"
#include "frugal/data/corpus.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "frugal/io/atomic_file.h"

namespace frugal::data {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::json;

std::string fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

void check_vocabulary(const TokenShard& s, const std::string& dir, const Tokenizer& tokenizer) {
  FRUGAL_CHECK(s.vocab_size() == tokenizer.vocab_size(), "{} holds ids of a {}-token "
               "vocabulary but {} has {} tokens: they come from different `frugal prepare` runs; "
               "prepare the directory again", s.path(), s.vocab_size(), tokenizer_file(dir),
               tokenizer.vocab_size());
}

// Refuses, or with --overwrite clears, what an earlier run left in the output directory: a
// finished preparation (manifest.json; removed first, so the directory never looks finished while
// its shards are going), an interrupted one (shards/ without a manifest) or one of an earlier
// frugal (train.bin, val.bin). Only files of those names are removed.
void clear_output(const PrepareOptions& o) {
  const fs::path dir(o.out_dir), manifest = dir / kManifestFile, shards = dir / kShardDir;
  std::error_code ec;
  const bool finished = fs::exists(manifest, ec), interrupted = !finished && fs::exists(shards, ec),
             legacy = fs::exists(dir / "train.bin", ec) || fs::exists(dir / "val.bin", ec);
  if (!finished && !interrupted && !legacy) return;
  FRUGAL_CHECK(o.overwrite, "{} {}; pass --overwrite to prepare it again (or choose another --out)",
               o.out_dir, finished ? "is already prepared (it has manifest.json)"
               : interrupted ? "holds the shards of an interrupted `frugal prepare` (shards/ but no manifest.json)"
                             : "holds data prepared by an earlier frugal (train.bin, val.bin)");
  fs::remove(manifest, ec);
  for (const char* name : {"train.bin", "val.bin"}) fs::remove(dir / name, ec);
  if (fs::is_directory(shards, ec)) {
    for (const auto& e : fs::directory_iterator(shards, ec))
      if (e.path().extension() == ".bin" || e.path().filename().string().find(".bin.tmp.") != std::string::npos)
        fs::remove(e.path(), ec);
    fs::remove(shards, ec);  // only when empty
  }
}

constexpr int64_t kBytesBlock = 1 << 16;  // tokens per entry of StreamInfo::block_bytes

struct ShardInfo {
  std::string file;  // relative to the output directory
  int64_t tokens = 0;
};

struct StreamInfo {
  std::vector<ShardInfo> shards;
  std::vector<SourceStats> sources;
  int64_t tokens = 0, documents = 0, input_bytes = 0, text_bytes = 0;
  std::vector<int64_t> block_bytes;  // text bytes before token k * kBytesBlock, for each block started
};

// Writes one stream's tokens into shards/<name>_NNNNNN.bin of at most shard_tokens tokens each.
class ShardedStreamWriter {
 public:
  ShardedStreamWriter(const PrepareOptions& o, std::string name, int vocab_size, std::vector<std::string>& created)
      : o_(o), name_(std::move(name)), vocab_size_(vocab_size), created_(created) {}

  void append(std::span<const int32_t> tokens, StreamInfo& info) {
    while (!tokens.empty()) {
      if (!writer_) {
        info.shards.push_back({fmt::format("{}/{}_{:06}.bin", kShardDir, name_, info.shards.size()), 0});
        writer_ = std::make_unique<ShardWriter>((fs::path(o_.out_dir) / info.shards.back().file).string(), vocab_size_);
      }
      const auto n = static_cast<size_t>(std::min<int64_t>(o_.shard_tokens - writer_->size(), static_cast<int64_t>(tokens.size())));
      writer_->append(tokens.first(n));
      tokens = tokens.subspan(n);
      if (writer_->size() == o_.shard_tokens) close(info);
    }
  }
  void close(StreamInfo& info) {
    if (!writer_) return;
    info.shards.back().tokens = writer_->size();
    writer_->commit();
    created_.push_back((fs::path(o_.out_dir) / info.shards.back().file).string());
    writer_.reset();
  }

 private:
  const PrepareOptions& o_;
  std::string name_;
  int vocab_size_;
  std::vector<std::string>& created_;
  std::unique_ptr<ShardWriter> writer_;
};

// Batches of units from a reader thread, at most two waiting: reading and parsing the next batch
// overlaps the encoding of this one, in bounded memory.
class UnitBatches {
 public:
  UnitBatches(const std::vector<std::string>& files, const std::string& field, size_t batch_bytes)
      : thread_([this, &files, &field, batch_bytes] { run(files, field, batch_bytes); }) {}
  ~UnitBatches() {
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  // The next batch; empty at the end. Rethrows the reader's Error.
  std::vector<TextUnit> next() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (queue_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return {};
    }
    std::vector<TextUnit> batch = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();
    return batch;
  }
  std::vector<SourceStats> sources() const { return sources_; }  // once next() returned empty

 private:
  struct Cancelled {};
  void push(std::vector<TextUnit>&& batch) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < 2 || cancelled_; });
    if (cancelled_) throw Cancelled{};
    queue_.push_back(std::move(batch));
    changed_.notify_all();
  }
  void run(const std::vector<std::string>& files, const std::string& field, size_t batch_bytes) {
    try {
      std::vector<TextUnit> batch;
      size_t bytes = 0;
      sources_ = read_units(files, field, [&](TextUnit&& u) {
        bytes += u.text.size() + 64;  // a document's own cost, however short
        batch.push_back(std::move(u));
        if (bytes >= batch_bytes) {
          push(std::exchange(batch, {}));
          bytes = 0;
        }
      });
      if (!batch.empty()) push(std::move(batch));
    } catch (const Cancelled&) {
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<TextUnit>> queue_;
  bool finished_ = false, cancelled_ = false;
  std::exception_ptr error_;
  std::vector<SourceStats> sources_;
  std::thread thread_;  // last: starts once the members above exist
};

// Encodes the files' documents in order into shards of stream `name`.
StreamInfo encode_stream(const PrepareOptions& o, const std::vector<std::string>& files, const std::string& name,
                         const Tokenizer& tok, const std::vector<int32_t>& piece_len, int threads,
                         std::vector<std::string>& created) {
  StreamInfo info;
  ShardedStreamWriter out(o, name, tok.vocab_size(), created);
  UnitBatches batches(files, o.text_field, static_cast<size_t>(threads) * 8 * kUnitBytes);
  std::vector<std::vector<int32_t>> encoded;
  std::vector<std::exception_ptr> errors;
  const int32_t eot = tok.eot_token();
  while (true) {
    std::vector<TextUnit> batch = batches.next();
    if (batch.empty()) break;
    const int n = static_cast<int>(batch.size());
    encoded.assign(batch.size(), {});
    errors.assign(batch.size(), nullptr);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int i = 0; i < n; ++i) {
      try {
        encoded[i] = tok.encode(batch[i].text);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
    for (int i = 0; i < n; ++i) {
      if (errors[i]) std::rethrow_exception(errors[i]);
      if (batch[i].starts_document) {
        if (info.documents > 0 && eot >= 0) {
          if (info.tokens % kBytesBlock == 0) info.block_bytes.push_back(info.text_bytes);
          out.append({&eot, 1}, info);
          ++info.tokens;
        }
        ++info.documents;
      }
      for (const int32_t t : encoded[i]) {
        if (info.tokens % kBytesBlock == 0) info.block_bytes.push_back(info.text_bytes);
        info.text_bytes += piece_len[static_cast<size_t>(t)];
        ++info.tokens;
      }
      out.append(encoded[i], info);
    }
  }
  out.close(info);
  info.sources = batches.sources();
  for (const SourceStats& s : info.sources) info.input_bytes += s.bytes;
  return info;
}

// The char tokenizer's vocabulary: every code point of the corpus, in one streaming pass.
CharTokenizer char_vocabulary(const PrepareOptions& o, const std::vector<std::string>& files) {
  std::vector<bool> seen(0x110000, false);
  read_units(files, o.text_field, [&](TextUnit&& u) {
    for (size_t pos = 0; pos < u.text.size();) seen[next_code_point(u.text, pos)] = true;
  });
  std::vector<uint32_t> code_points;
  for (uint32_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) code_points.push_back(cp);
  FRUGAL_CHECK(!code_points.empty(), "the --input files are empty; give text to tokenize");
  return CharTokenizer(std::move(code_points));
}

// Tokens [begin, end) of a stream stored in `shards` (files relative to dir), opening only the
// shards that hold part of it; each is checked against its expected count and the vocabulary.
std::shared_ptr<const TokenSet> open_range(const std::string& dir, const std::vector<ShardInfo>& shards,
                                           int64_t begin, int64_t end, const std::string& name,
                                           const Tokenizer& tokenizer) {
  std::vector<std::shared_ptr<const TokenShard>> opened;
  int64_t offset = 0, first = -1;
  for (const ShardInfo& sh : shards) {
    if (offset + sh.tokens > begin && offset < end) {
      const std::string path = (fs::path(dir) / sh.file).string();
      FRUGAL_CHECK(fs::exists(path), "shard {} of {}/{} not found; the directory is incomplete, "
                   "prepare it again", path, dir, kManifestFile);
      auto s = std::make_shared<const TokenShard>(TokenShard::open(path));
      FRUGAL_CHECK(s->size() == sh.tokens, "shard {} holds {} tokens but {}/{} says {}; the "
                   "directory is damaged, prepare it again", path, s->size(), dir, kManifestFile, sh.tokens);
      check_vocabulary(*s, dir, tokenizer);
      if (first < 0) first = offset;
      opened.push_back(std::move(s));
    }
    offset += sh.tokens;
  }
  FRUGAL_CHECK(first >= 0, "{} is empty; prepare the directory again", name);
  return std::make_shared<const TokenSet>(std::move(opened), name, begin - first, end - first);
}

// Text bytes of the stream's tokens [0, pos): the sum recorded at pos's block plus the block's
// tokens before pos, read back from the shard files (at most kBytesBlock of them, so that no
// more of the corpus than that is read again or mapped).
int64_t bytes_before(const std::string& dir, const StreamInfo& s, int64_t pos, int token_bytes,
                     const std::vector<int32_t>& piece_len) {
  const auto block = static_cast<size_t>(pos / kBytesBlock);
  if (block == s.block_bytes.size()) return s.text_bytes;  // pos == tokens, at a block start
  int64_t bytes = s.block_bytes[block], offset = 0;
  for (int64_t p = static_cast<int64_t>(block) * kBytesBlock; const ShardInfo& sh : s.shards) {
    if (p < pos && p < offset + sh.tokens) {
      const int64_t n = std::min(pos, offset + sh.tokens) - p;
      std::vector<uint8_t> raw(static_cast<size_t>(n * token_bytes));
      std::ifstream in(fs::path(dir) / sh.file, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(kShardHeaderBytes + (p - offset) * token_bytes));
      in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
      FRUGAL_CHECK(in.good(), "cannot read back {} just written; check the disk", (fs::path(dir) / sh.file).string());
      for (int64_t i = 0; i < n; ++i) {
        uint32_t id = 0;
        std::memcpy(&id, raw.data() + i * token_bytes, static_cast<size_t>(token_bytes));
        bytes += piece_len[id];
      }
      p += n;
    }
    offset += sh.tokens;
  }
  return bytes;
}

json stream_json(const StreamInfo& s) {
  json shards = json::array(), sources = json::array();
  for (const ShardInfo& sh : s.shards) shards.push_back({{"file", sh.file}, {"tokens", sh.tokens}});
  for (const SourceStats& src : s.sources)
    sources.push_back({{"path", src.path == "-" ? src.path : fs::absolute(src.path).lexically_normal().string()},
                       {"documents", src.documents}, {"bytes", src.bytes}});
  return {{"tokens", s.tokens}, {"documents", s.documents}, {"bytes", s.text_bytes},
          {"input_bytes", s.input_bytes}, {"shards", shards}, {"sources", sources}};
}

json read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  json m;
  try {
    m = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({}); prepare the directory again with `frugal prepare --overwrite`", path, e.what());
  }
  FRUGAL_CHECK(m.value("format", "") == "frugal-token-shards", "{} is not a frugal data manifest "
               "(no \"format\": \"frugal-token-shards\"); prepare the directory again", path);
  FRUGAL_CHECK(m.value("version", 0) == kManifestVersion, "{} has manifest version {}, this frugal "
               "reads version {}; prepare the directory again", path, m.value("version", 0), kManifestVersion);
  return m;
}

// The .bin files of `dir` whose name, split at '_' and '.', has the word `split`.
std::vector<std::string> foreign_split_files(const std::string& dir, const std::string& split) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !name.ends_with(".bin")) continue;
    std::string stem = name.substr(0, name.size() - 4);
    std::replace(stem.begin(), stem.end(), '.', '_');
    for (size_t start = 0; start <= stem.size();) {
      const size_t end = std::min(stem.find('_', start), stem.size());
      if (std::string_view(stem).substr(start, end - start) == split) {
        files.push_back(e.path().string());
        break;
      }
      start = end + 1;
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

PrepareResult prepare(const PrepareOptions& o) {
  FRUGAL_CHECK(!o.inputs.empty(), "no input files; pass at least one --input FILE|DIR|GLOB");
  FRUGAL_CHECK(!o.out_dir.empty(), "no output directory; pass --out DIR");
  FRUGAL_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction {} must be in [0, 1)", o.val_fraction);
  FRUGAL_CHECK(o.val_fraction > 0 || !o.val_inputs.empty(), "--val-fraction 0 without --val-input "
               "leaves the validation split empty, and training evaluates on it; give a fraction "
               "in (0, 1) or validation files with --val-input FILE");
  FRUGAL_CHECK(o.shard_tokens >= 2, "--shard-tokens {} must be at least 2", o.shard_tokens);
  FRUGAL_CHECK(!o.text_field.empty(), "--text-field is empty; name the JSONL field holding the text");
  FRUGAL_CHECK(o.threads >= 0, "--threads {} must be 0 (OpenMP's default) or positive", o.threads);
  Timer total;
  const std::vector<std::string> files = expand_inputs(o.inputs, "--input");
  const std::vector<std::string> val_files = expand_inputs(o.val_inputs, "--val-input");
  io::create_directories(o.out_dir, "the output directory (--out)");
  clear_output(o);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();

  std::unique_ptr<Tokenizer> tok;
  if (o.tokenizer == "char") {
    FRUGAL_CHECK(std::find(files.begin(), files.end(), "-") == files.end() &&
                     std::find(val_files.begin(), val_files.end(), "-") == val_files.end(),
                 "--tokenizer char reads the inputs twice (its vocabulary first) but standard input "
                 "(-) can be read once; save it to a file, or give an existing vocabulary (char:VOCAB.json)");
    std::vector<std::string> all = files;
    all.insert(all.end(), val_files.begin(), val_files.end());
    tok = std::make_unique<CharTokenizer>(char_vocabulary(o, all));
  } else {
    tok = load_tokenizer(o.tokenizer, {.allow_special = o.special_eot, .threads = 1});
  }
  const std::vector<int32_t> piece_len = token_text_bytes(*tok);

  PrepareResult r;
  std::vector<std::string> created;  // shard files of this run, removed if it fails
  try {
    io::create_directories((fs::path(o.out_dir) / kShardDir).string(), "the output directory (--out)");
    Timer encode;
    const StreamInfo train = encode_stream(o, files, "train", *tok, piece_len, threads, created);
    FRUGAL_CHECK(train.input_bytes > 0, "the --input files are empty; give text to tokenize");
    StreamInfo val;
    if (!val_files.empty()) val = encode_stream(o, val_files, "val", *tok, piece_len, threads, created);
    r.encode_seconds = encode.seconds();

    // The splits: train is the train stream's front, val its last val_fraction of the tokens
    // (the same cut as earlier versions made), or the whole val stream.
    const int64_t n_val = val_files.empty() ? static_cast<int64_t>(static_cast<double>(train.tokens) * o.val_fraction) : val.tokens;
    r.train_tokens = train.tokens - (val_files.empty() ? n_val : 0);
    r.val_tokens = n_val;
    // A sample is a token and the next one to predict: a shorter split has none.
    FRUGAL_CHECK(r.train_tokens >= 2, "the train split would hold {} token(s), but it needs at least "
                 "2 (a token and the next one to predict) and training needs more than "
                 "train.seq_len; give more --input text", r.train_tokens);
    FRUGAL_CHECK(r.val_tokens >= 2, "the val split would hold {} token(s), but it needs at least 2 "
                 "(a token and the next one to predict); {}", r.val_tokens, val_files.empty()
                     ? "give more --input text or a larger --val-fraction"
                     : "give more --val-input text");

    io::write_file_atomic((fs::path(o.out_dir) / kTokenizerFile).string(), tok->to_json() + "\n");
    json splits;
    if (val_files.empty()) {
      const int64_t val_bytes = train.text_bytes - bytes_before(o.out_dir, train, r.train_tokens,
                                                                shard_token_bytes(tok->vocab_size()), piece_len);
      splits["train"] = {{"stream", "train"}, {"begin", 0}, {"end", r.train_tokens}, {"bytes", train.text_bytes - val_bytes}};
      splits["val"] = {{"stream", "train"}, {"begin", r.train_tokens}, {"end", train.tokens}, {"bytes", val_bytes}};
    } else {
      splits["train"] = {{"stream", "train"}, {"begin", 0}, {"end", train.tokens}, {"bytes", train.text_bytes}};
      splits["val"] = {{"stream", "val"}, {"begin", 0}, {"end", val.tokens}, {"bytes", val.text_bytes}};
    }
    json streams{{"train", stream_json(train)}};
    if (!val_files.empty()) streams["val"] = stream_json(val);
    const json manifest{
        {"format", "frugal-token-shards"}, {"version", kManifestVersion},
        {"tokenizer", {{"file", kTokenizerFile}, {"spec", tok->spec()}, {"vocab_size", tok->vocab_size()},
                       {"eot_token", tok->eot_token()}, {"fnv1a64", fnv1a64(tok->to_json())}}},
        {"token_bytes", shard_token_bytes(tok->vocab_size())}, {"shard_tokens", o.shard_tokens},
        {"text_field", o.text_field}, {"val_split", val_files.empty()
            ? fmt::format("the last {} of the train stream's tokens", o.val_fraction) : "the val stream (--val-input)"},
        {"streams", streams}, {"splits", splits}};
    io::write_file_atomic((fs::path(o.out_dir) / kManifestFile).string(), manifest.dump(1) + "\n");  // last
    r.input_bytes = train.input_bytes + val.input_bytes;
    r.documents = train.documents + val.documents;
    r.shards = static_cast<int64_t>(train.shards.size() + val.shards.size());
  } catch (...) {
    std::error_code ec;
    for (const std::string& f : created) fs::remove(f, ec);
    fs::remove(fs::path(o.out_dir) / kShardDir, ec);  // only when empty
    throw;
  }
  r.vocab_size = tok->vocab_size();
  r.total_seconds = total.seconds();
  return r;
}

std::unique_ptr<Tokenizer> load_prepared_tokenizer(const std::string& dir, const std::string& spec) {
  const std::string path = tokenizer_file(dir);
  if (!spec.empty()) {
    auto tok = load_tokenizer(spec);
    if (fs::exists(path)) {
      const std::string diff = vocabulary_difference(*tok, "data.tokenizer " + spec, *load_tokenizer_json(path), path);
      FRUGAL_CHECK(diff.empty(), "data.tokenizer does not match the data's own tokenizer: {}; leave "
                   "data.tokenizer empty for a directory made by `frugal prepare`", diff);
    }
    return tok;
  }
  FRUGAL_CHECK(fs::exists(path), "{} not found; the data directory must be one made by `frugal "
               "prepare --out {}` (for nanoGPT or llm.c token files, name their tokenizer: "
               "data.tokenizer = \"gpt2\", or --tokenizer)", path, dir);
  return load_tokenizer_json(path);
}

std::shared_ptr<const TokenSet> open_prepared_split(const std::string& dir, const std::string& split,
                                                    const Tokenizer& tokenizer) {
  if (fs::exists(fs::path(dir) / kManifestFile)) {
    const json m = read_manifest(dir);
    FRUGAL_CHECK(m["splits"].contains(split), "{}/{} has no split \"{}\"; prepare the directory "
                 "again", dir, kManifestFile, split);
    const json& sp = m["splits"][split];
    const json& stream = m["streams"][sp["stream"].get<std::string>()];
    std::vector<ShardInfo> shards;
    for (const json& sh : stream["shards"]) shards.push_back({sh["file"].get<std::string>(), sh["tokens"].get<int64_t>()});
    return open_range(dir, shards, sp["begin"].get<int64_t>(), sp["end"].get<int64_t>(), dir + ": " + split, tokenizer);
  }
  FRUGAL_CHECK(!fs::exists(fs::path(dir) / kShardDir), "{} holds the shards of an interrupted `frugal "
               "prepare` (no {}); run it again with --overwrite", dir, kManifestFile);
  const std::string legacy = (fs::path(dir) / (split + ".bin")).string();
  if (fs::exists(tokenizer_file(dir))) {  // prepared by an earlier frugal: DIR/train.bin, DIR/val.bin
    FRUGAL_CHECK(fs::exists(legacy), "data file {} not found; create it with `frugal prepare --out "
                 "{}` or point at a directory made by `frugal prepare`", legacy, dir);
    auto shard = std::make_shared<const TokenShard>(TokenShard::open(legacy));
    check_vocabulary(*shard, dir, tokenizer);
    return std::make_shared<const TokenSet>(std::move(shard));
  }
  const std::vector<std::string> files = foreign_split_files(dir, split);
  FRUGAL_CHECK(!files.empty(), "{} has no {} nor {} data (.bin files named like {}.bin or "
               "NAME_{}_000001.bin); point data.dir at a directory made by `frugal prepare`, nanoGPT "
               "or llm.c", dir, kManifestFile, split, split, split);
  std::vector<std::shared_ptr<const TokenShard>> shards;
  for (const std::string& f : files)
    shards.push_back(std::make_shared<const TokenShard>(TokenShard::open_foreign(f, tokenizer.vocab_size())));
  return std::make_shared<const TokenSet>(std::move(shards), dir + ": " + split);
}

std::vector<int32_t> token_text_bytes(const Tokenizer& tok) {
  std::vector<int32_t> len(static_cast<size_t>(tok.vocab_size()));
  for (int id = 0; id < tok.vocab_size(); ++id)
    len[static_cast<size_t>(id)] = id == tok.eot_token() ? 0 : static_cast<int32_t>(tok.piece(id).size());
  return len;
}

int64_t text_bytes(const TokenSet& tokens, const Tokenizer& tokenizer) {
  const std::vector<int32_t> len = token_text_bytes(tokenizer);
  std::vector<int32_t> block(1 << 16);
  int64_t bytes = 0;
  for (int64_t start = 0; start < tokens.size(); start += static_cast<int64_t>(block.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(block.size()), tokens.size() - start);
    tokens.read(start, n, block.data());
    for (int64_t i = 0; i < n; ++i) bytes += len[static_cast<size_t>(block[static_cast<size_t>(i)])];
  }
  return bytes;
}

}  // namespace frugal::data
