// `frugal bench` (work in progress).
#include "frugal/cli/commands.h"

namespace frugal::cli {
void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "(in progress)"); }
}  // namespace frugal::cli
