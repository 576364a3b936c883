// `frugal train` (work in progress).
#include "frugal/cli/commands.h"

namespace frugal::cli {
void add_train_command(CLI::App& app) { app.add_subcommand("train", "(in progress)"); }
}  // namespace frugal::cli
