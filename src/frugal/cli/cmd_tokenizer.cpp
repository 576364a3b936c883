// `frugal tokenizer train`: a byte-level BPE (GPT-2 style) trained on a sample of a corpus,
// written as vocab.json + merges.txt (use it as --tokenizer gpt2:DIR) and Hugging Face's
// tokenizer.json (docs/data.md).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "frugal/cli/commands.h"
#include "frugal/core/error.h"
#include "frugal/data/bpe_trainer.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {
namespace {

struct TrainTokenizerArgs {
  data::CorpusSampleOptions sample;
  int vocab_size = 8192;
  std::string out_dir;
  bool overwrite = false;
};

void run_train(const TrainTokenizerArgs& a) {
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer.json"}) {
    const std::filesystem::path path = std::filesystem::path(a.out_dir) / name;
    FRUGAL_CHECK(a.overwrite || !std::filesystem::exists(path), "'{}' exists; choose another --out "
                 "or pass --overwrite to replace the tokenizer there", path.string());
  }
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const data::CorpusSample sample = data::sample_corpus(a.sample);
  FRUGAL_CHECK(sample.bytes > 0, "the inputs hold no text; give --input files with documents");
  const double read_s = seconds();
  const data::BpeModel model = data::train_bpe(sample.counts, a.vocab_size);
  data::write_bpe_files(model, a.out_dir);
  io::print("{}: {} tokens ({} merges{}), vocab.json, merges.txt, tokenizer.json; use it as "
            "--tokenizer gpt2:{}\n", a.out_dir, model.tokens.size(), model.merges.size(),
            static_cast<int>(model.tokens.size()) < a.vocab_size ? "; the sample has no more pairs" : "",
            a.out_dir);
  io::print("sample {:.1f} MB, {} documents, {} distinct pieces{}; read and counted in {:.2f} s, "
            "total {:.2f} s\n", sample.bytes / 1e6, sample.documents, sample.counts.pieces().size(),
            sample.truncated ? " (cut at the sample bound)" : "", read_s, seconds());
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train a tokenizer");
  cmd->require_subcommand(1);
  auto args = std::make_shared<TrainTokenizerArgs>();
  auto* train = cmd->add_subcommand("train", "Train a byte-level BPE (GPT-2 style) on a sample of a "
                                    "corpus; writes DIR/vocab.json, DIR/merges.txt, DIR/tokenizer.json");
  train->add_option("--input", args->sample.inputs, "corpus: a file, a directory (its .txt/.jsonl/"
                    ".json files, optionally .gz/.xz/.zst) or a quoted glob; repeatable, read in order")
      ->required();
  train->add_option("--vocab-size", args->vocab_size, "tokens, the 256 bytes and <|endoftext|> included")
      ->capture_default_str();
  train->add_option("--out", args->out_dir, "output directory")->required();
  train->add_option("--text-field", args->sample.text_field, "JSONL: the field of each line's object "
                    "holding the document's text")->capture_default_str();
  train->add_option("--sample-bytes", args->sample.max_bytes, "train on at most this many bytes of "
                    "text, the first of the inputs (0: all)")->capture_default_str();
  train->add_option("--sample-documents", args->sample.max_documents, "and at most this many "
                    "documents (0: no limit)")->capture_default_str();
  train->add_option("--threads", args->sample.threads, "threads counting the sample's pieces (0 = "
                    "OpenMP default); the result is the same for any number");
  train->add_flag("--overwrite", args->overwrite, "replace the tokenizer files in --out");
  train->callback([args] { run_train(*args); });
}

}  // namespace frugal::cli
