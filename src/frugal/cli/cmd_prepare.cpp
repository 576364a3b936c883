// `frugal prepare`: tokenize text files into train/val token shards plus frugal_tokenizer.json.
#include <fmt/format.h>

#include "frugal/cli/commands.h"
#include "frugal/data/prepare.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {

void add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "Tokenize text files into DIR/train.bin, DIR/val.bin "
                                            "and DIR/frugal_tokenizer.json");
  auto opts = std::make_shared<data::PrepareOptions>();
  cmd->add_option("--tokenizer", opts->tokenizer, "gpt2, gpt2:DIR, char (vocabulary from the "
                  "inputs), or an existing vocabulary: char:VOCAB_FILE or a frugal_tokenizer.json (e.g. "
                  "a checkpoint's)")
      ->capture_default_str();
  cmd->add_option("--input", opts->inputs, "training text file (UTF-8; .xz allowed); repeatable")->required();
  cmd->add_option("--val-input", opts->val_inputs,
                  "validation text file; repeatable (default: the last --val-fraction of the tokens)");
  cmd->add_option("--out", opts->out_dir, "output directory")->required();
  cmd->add_option("--val-fraction", opts->val_fraction, "fraction of tokens held out for validation")
      ->capture_default_str();
  cmd->add_flag("--special-eot,!--text-eot", opts->special_eot,
                "read the literal <|endoftext|> as the special token (default) or as plain text");
  cmd->add_option("--threads", opts->threads, "encoding threads (0 = OpenMP default)");
  cmd->callback([opts] {
    const data::PrepareResult r = data::prepare(*opts);
    io::print("{}: train.bin {} tokens, val.bin {} tokens, vocab {}, {}\n",
              opts->out_dir, r.train_tokens, r.val_tokens, r.vocab_size, data::kTokenizerFile);
    io::print("read {:.1f} MB; tokenized in {:.2f} s ({:.1f} MB/s); total {:.2f} s\n",
              r.input_bytes / 1e6, r.encode_seconds, r.input_bytes / 1e6 / std::max(r.encode_seconds, 1e-9),
              r.total_seconds);
  });
}

}  // namespace frugal::cli
