// `frugal export --format hf CHECKPOINT_OR_RUN_DIR OUT_DIR [--allow-lossy] [--dtype bf16]`: a
// checkpoint as a directory that transformers' GPT2LMHeadModel (a decoder) or BertForMaskedLM (an
// encoder) and AutoTokenizer load (see app/hf_model.h), with the weights the model computes with
// (masks applied), in fp32 or rounded to bf16; what the format cannot express is refused, or (a
// decoder's sparse attention) with --allow-lossy dropped and named.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "frugal/app/hf_model.h"
#include "frugal/cli/commands.h"
#include "frugal/data/masking.h"
#include "frugal/io/stdout.h"
#include "frugal/train/checkpoint.h"

namespace frugal::cli {

namespace {
struct ExportArgs {
  std::string format = "hf";
  std::string source, out_dir;
  bool allow_lossy = false;
  std::string dtype = "fp32";
};
}  // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "export a checkpoint to another format");
  cmd->add_option("--format", args->format, "output format: hf (Hugging Face GPT-2, or BERT for an encoder)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  cmd->add_option("checkpoint", args->source, "run directory (its latest checkpoint) or checkpoint directory")
      ->required();
  cmd->add_option("out_dir", args->out_dir, "directory to write (created)")->required();
  cmd->add_flag("--allow-lossy", args->allow_lossy,
                "export even what the format cannot express (a sparse attention pattern becomes "
                "dense causal attention), saying what is dropped");
  cmd->add_option("--dtype", args->dtype, "weights' dtype: fp32 (the trained masters) or bf16 (rounded to "
                  "nearest even; torch_dtype bfloat16; half the bytes)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->callback([args] {
    const PinnedCheckpoint pinned = pin_checkpoint(args->source);  // no run prunes it while we read
    const std::string& checkpoint = pinned.dir;
    const CheckpointModel loaded = load_checkpoint_model(checkpoint);
    const GPT& model = loaded.model();
    const auto tokenizer = load_checkpoint_tokenizer(checkpoint);
    const io::HfExport exported = io::export_hf(model, *tokenizer, args->out_dir, args->allow_lossy,
                                                args->dtype == "bf16" ? io::DType::BF16 : io::DType::F32);
    io::print("exported {} ({} parameters) to {} as {}: config.json, model.safetensors ({})\n", checkpoint,
              model.table().num_parameters(), args->out_dir, exported.architecture, args->dtype);
    for (const std::string& note : loaded.notes) io::print("{}\n", note);
    if (!exported.dropped.empty())
      io::print("dropped (--allow-lossy): {}; the exported model attends to every earlier position\n",
                exported.dropped);
    if (exported.tokenizer_files) {
      io::print("tokenizer: vocab.json, merges.txt, tokenizer.json, tokenizer_config.json (AutoTokenizer loads "
                "them){}\n", model.config().encoder() ? fmt::format("; {} is id {}", data::kMaskToken,
                                                                      data::encoder_masking(*tokenizer).mask_id) : "");
    } else {
      io::print("tokenizer: transformers has no tokenizer matching '{}'; encode text with frugal's "
                "({}/frugal_tokenizer.json, e.g. `frugal tokenize --tokenizer {}/frugal_tokenizer.json`)\n",
                tokenizer->spec(), args->out_dir, args->out_dir);
    }
  });
}

}  // namespace frugal::cli
