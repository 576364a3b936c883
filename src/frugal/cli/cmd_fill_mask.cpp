// `frugal fill-mask CHECKPOINT_OR_RUN_DIR --text "... <mask> ..."`: an encoder's (model.objective
// = mlm) most likely tokens for each <mask> of the text, with their probabilities, and the text
// filled with the best of each.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "frugal/cli/commands.h"
#include "frugal/core/threading.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/fill_mask.h"

namespace frugal::cli {
namespace {

struct FillMaskArgs {
  std::string path, text;
  int top = 5;
  int threads = 0;
};

void run_fill_mask(const FillMaskArgs& a) {
  set_num_threads(a.threads);
  const PinnedCheckpoint checkpoint = pin_checkpoint(a.path);  // no run prunes it while we read
  const auto tokenizer = load_checkpoint_tokenizer(checkpoint.dir);
  const CheckpointModel loaded = load_checkpoint_model(checkpoint.dir);
  for (const std::string& note : loaded.notes) fmt::print(stderr, "{}\n", note);  // stdout: the fills
  print_mask_fills(loaded.model(), *tokenizer, a.text, a.top);
}

}  // namespace

void add_fill_mask_command(CLI::App& app) {
  auto args = std::make_shared<FillMaskArgs>();
  CLI::App* cmd = app.add_subcommand("fill-mask", "an encoder's (model.objective = mlm) predictions for <mask> in a text");
  cmd->add_option("checkpoint", args->path,
                  "a checkpoint directory, or a run directory (its latest checkpoint)")->required();
  cmd->add_option("--text", args->text, "text with one or more <mask> markers")->required();
  cmd->add_option("--top", args->top, "predictions shown per <mask>")->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "threads; 0 keeps the default (all cores)")->capture_default_str();
  cmd->callback([args] { run_fill_mask(*args); });
}

}  // namespace frugal::cli
