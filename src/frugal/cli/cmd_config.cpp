// `frugal config [CONFIG.toml] [--set key=value ...] [--reference]`: prints the fully resolved run
// config (what `frugal train` would use), or the Markdown reference of every key.
#include <fmt/format.h>

#include <memory>

#include "frugal/cli/commands.h"
#include "frugal/io/stdout.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

namespace {
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
  bool reference = false;
};
}  // namespace

void add_config_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* cmd = app.add_subcommand("config", "print the resolved run config, or the reference of every key");
  cmd->add_option("config", args->path, "run config (TOML); omitted: the defaults");
  cmd->add_option("--set", args->overrides, "override a key: --set optim.lr=3e-4 (repeatable)");
  cmd->add_flag("--reference", args->reference, "print the Markdown reference of every key (docs/config.md)");
  cmd->callback([args] {
    if (args->reference) {
      io::print("{}", config_reference_markdown());
      return;
    }
    const io::Config config = io::Config::load(run_schema(), args->path, args->overrides);
    run_settings(config);  // the checks `frugal train` makes before it reads data
    io::print("{}", config.to_toml());
  });
}

}  // namespace frugal::cli
