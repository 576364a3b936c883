// `frugal prepare`: tokenize a corpus into a directory of token shards, manifest.json and
// frugal_tokenizer.json (see docs/data.md).
#include <fmt/format.h>

#include "frugal/cli/commands.h"
#include "frugal/data/prepare.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {

void add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "Tokenize a corpus (text/JSONL files, plain, .gz, .xz or "
                                            ".zst) into token shards, DIR/manifest.json and "
                                            "DIR/frugal_tokenizer.json");
  auto opts = std::make_shared<data::PrepareOptions>();
  cmd->add_option("--tokenizer", opts->tokenizer, "gpt2, gpt2:DIR, char (vocabulary from the "
                  "inputs), or an existing vocabulary: char:VOCAB_FILE or a frugal_tokenizer.json (e.g. "
                  "a checkpoint's)")
      ->capture_default_str();
  cmd->add_option("--input", opts->inputs, "training corpus: a file, a directory (its .txt/.jsonl/"
                  ".json files, optionally .gz/.xz/.zst) or a quoted glob; repeatable, read in order")
      ->required();
  cmd->add_option("--val-input", opts->val_inputs,
                  "validation corpus, like --input; repeatable (default: the last --val-fraction of the tokens)");
  cmd->add_option("--out", opts->out_dir, "output directory")->required();
  cmd->add_option("--val-fraction", opts->val_fraction, "fraction of the tokens held out for validation (their end)")
      ->capture_default_str();
  cmd->add_option("--text-field", opts->text_field, "JSONL: the field of each line's object holding "
                  "the document's text")->capture_default_str();
  cmd->add_option("--shard-tokens", opts->shard_tokens, "tokens per shard file")->capture_default_str();
  cmd->add_flag("--overwrite", opts->overwrite, "replace a finished or interrupted preparation in --out");
  cmd->add_flag("--special-eot,!--text-eot", opts->special_eot,
                "read the literal <|endoftext|> as the special token (default) or as plain text");
  cmd->add_option("--threads", opts->threads, "encoding threads (0 = OpenMP default); the output "
                  "is the same for any number");
  cmd->callback([opts] {
    const data::PrepareResult r = data::prepare(*opts);
    io::print("{}: train {} tokens, val {} tokens, {} documents in {} shard(s), vocab {}, {}, {}\n",
              opts->out_dir, r.train_tokens, r.val_tokens, r.documents, r.shards, r.vocab_size,
              data::kManifestFile, data::kTokenizerFile);
    io::print("read {:.1f} MB; read and tokenized in {:.2f} s ({:.1f} MB/s); total {:.2f} s\n",
              r.input_bytes / 1e6, r.encode_seconds, r.input_bytes / 1e6 / std::max(r.encode_seconds, 1e-9),
              r.total_seconds);
  });
}

}  // namespace frugal::cli
