// `frugal train CONFIG.toml [--set key=value ...]`: trains a model and prints samples.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "frugal/cli/commands.h"
#include "frugal/io/stdout.h"
#include "frugal/parallel/world.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {

namespace {
struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  TrainerOptions options;
};
}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train a model from a TOML config");
  cmd->add_option("config", args->config_path, "run config (TOML), e.g. configs/shakespeare-char.toml")->required();
  cmd->add_option("--set", args->overrides, "override a config key: --set optim.lr=3e-4 (repeatable)");
  cmd->add_option("--resume", args->options.resume, "continue a run bit-exactly from its latest checkpoint (run or checkpoint directory), in that run's directory unless --set train.out_dir=DIR");
  cmd->add_option("--init-from", args->options.init_from, "start from a checkpoint's weights with a fresh optimizer (e.g. from `frugal import`)");
  cmd->add_flag("--overwrite", args->options.overwrite, "train.out_dir may hold an earlier run: delete its checkpoints and metrics and start over");
  cmd->callback([args] {
    std::vector<std::string> overrides = args->overrides;
    // A resume continues the checkpoint's run in its own directory, whatever out_dir the config
    // names; an explicit --set train.out_dir=DIR branches it into DIR.
    const bool out_dir_set = std::any_of(overrides.begin(), overrides.end(),
                                         [](const std::string& o) { return o.starts_with("train.out_dir="); });
    if (!args->options.resume.empty() && !out_dir_set)
      if (const std::string run = checkpoint_run_dir(resolve_checkpoint(args->options.resume)); !run.empty())
        overrides.push_back("train.out_dir=" + run);
    io::Config config = io::Config::load(run_schema(), args->config_path, overrides);
    // Under mpirun every rank trains its slice of each batch; rank 0 reports.
    parallel::World& world = parallel::World::current();
    world.set_timeout(run_settings(config).parallel.timeout);
    TrainerOptions options = args->options;
    options.group = &world.group();
    options.step_strategy = world.step_strategy();
    Trainer trainer(config, options);
    FitResult r = trainer.fit();
    if (!world.group().is_writer()) return;
    if (r.first_step == 0)
      io::print("trained {} steps in {:.1f} s", r.steps, r.seconds);
    else
      io::print("trained steps {} to {} in {:.1f} s ({} steps in {:.1f} s over the run's sessions)",
                r.first_step + 1, r.steps, r.seconds, r.steps, r.run_seconds);
    io::print(": train loss {:.4f}, val loss {:.4f}; peak memory {:.0f} MiB{}\n", r.final_train_loss, r.final_val_loss,
              r.peak_rss_mib, world.group().size() > 1 ? " (the largest rank's)" : "");
    if (!r.interrupted) trainer.print_samples();
  });
}

}  // namespace frugal::cli
