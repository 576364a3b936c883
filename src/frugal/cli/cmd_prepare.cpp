// `frugal prepare` (work in progress).
#include "frugal/cli/commands.h"

namespace frugal::cli {
void add_prepare_command(CLI::App& app) { app.add_subcommand("prepare", "(in progress)"); }
}  // namespace frugal::cli
