// `frugal tokenize` (text -> ids or pieces) and `frugal detokenize` (ids -> text).
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "frugal/cli/commands.h"
#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {
namespace {

constexpr const char* kTokenizerHelp = "gpt2, gpt2:DIR (vocab.json + merges.txt or encoder.json + "
                                      "vocab.bpe), char:VOCAB_FILE or a frugal_tokenizer.json";

struct TokenizeArgs {
  std::string tokenizer = "gpt2";
  std::string file;
  bool pieces = false;
  bool special_eot = true;
  int threads = 0;
};

void run_tokenize(const TokenizeArgs& a) {
  const auto tok = data::load_tokenizer(a.tokenizer, {.allow_special = a.special_eot, .threads = a.threads});
  const std::string text = data::read_text_file(a.file);
  data::check_utf8(text, a.file == "-" ? std::string("standard input") : "'" + a.file + "'");
  std::string out;
  for (int32_t id : tok->encode(text)) {
    if (!out.empty()) out += ' ';
    out += a.pieces ? data::quote_piece(tok->piece(id)) : std::to_string(id);
  }
  out += '\n';
  io::write_stdout(out);
}

void run_detokenize(const TokenizeArgs& a) {
  const auto tok = data::load_tokenizer(a.tokenizer);
  const std::string text = data::read_text_file(a.file);
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(" \t\r\n", pos);
    if (pos == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\r\n", pos), text.size());
    const std::string word = text.substr(pos, end - pos);
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FRUGAL_CHECK(used == word.size() && id >= 0 && id < tok->vocab_size(), "'{}' at byte offset {} "
                 "is not a token id of {} (0..{}); pass whitespace-separated ids as printed by "
                 "`frugal tokenize`", word, pos, tok->spec(), tok->vocab_size() - 1);
    ids.push_back(static_cast<int32_t>(id));
    pos = end;
  }
  const std::string decoded = tok->decode(ids);
  io::write_stdout(decoded);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* tok = app.add_subcommand("tokenize", "Print the token ids (or pieces) of a text file");
  tok->add_option("--tokenizer", args->tokenizer, kTokenizerHelp)
      ->capture_default_str();
  tok->add_flag("--pieces", args->pieces, "print each token's bytes as a quoted string instead of ids");
  tok->add_flag("--special-eot,!--text-eot", args->special_eot,
                "read the literal <|endoftext|> as the special token (default) or as plain text");
  tok->add_option("--threads", args->threads, "encoding threads (0 = OpenMP default)");
  tok->add_option("file", args->file, "text file, or - for standard input")->required();
  tok->callback([args] { run_tokenize(*args); });

  auto* detok = app.add_subcommand("detokenize", "Print the text of whitespace-separated token ids");
  detok->add_option("--tokenizer", args->tokenizer, kTokenizerHelp)
      ->capture_default_str();
  detok->add_option("file", args->file, "file of ids, or - for standard input")->required();
  detok->callback([args] { run_detokenize(*args); });
}

}  // namespace frugal::cli
