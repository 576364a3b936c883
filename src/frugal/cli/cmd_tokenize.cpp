// `frugal tokenize` / `frugal detokenize` (work in progress).
#include "frugal/cli/commands.h"

namespace frugal::cli {
void add_tokenize_commands(CLI::App& app) { app.add_subcommand("tokenize", "(in progress)"); }
}  // namespace frugal::cli
