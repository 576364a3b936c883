// `frugal import HF_DIR OUT_DIR [--tokenizer SPEC]`: a Hugging Face GPT-2 (GPT2LMHeadModel) or BERT
// (BertForMaskedLM) directory as a frugal run directory with one checkpoint (model only), for
// --init-from, sample and eval (app/hf_model.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "frugal/app/hf_model.h"
#include "frugal/cli/commands.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {

namespace {
struct ImportArgs {
  std::string hf_dir, out_dir, tokenizer;
};
}  // namespace

void add_import_command(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import", "import a Hugging Face GPT-2 or BERT masked-LM model (config.json + model.safetensors) as a checkpoint");
  cmd->add_option("hf_dir", args->hf_dir, "directory with config.json and model.safetensors")->required();
  cmd->add_option("out_dir", args->out_dir, "run directory to write the checkpoint into")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "gpt2, gpt2:DIR, char:VOCAB_FILE or a frugal_tokenizer.json (default: "
                  "HF_DIR/frugal_tokenizer.json if present, else gpt2 for GPT-2's 50257-token vocabulary, 50258 for an encoder's)");
  cmd->callback([args] {
    const std::string checkpoint = io::import_hf(args->hf_dir, args->out_dir, args->tokenizer);
    io::print("imported {} into {}\n", args->hf_dir, checkpoint);
  });
}

}  // namespace frugal::cli
