// `frugal experiment EXPERIMENT.toml [--out DIR] [--set KEY=VALUE] [--no-plots] [--only RUN,...]`:
// runs an experiment's pretraining and runs one after another (or only some of them, the others'
// results read from DIR) and writes DIR/results.md and DIR/report.md with the plots.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "frugal/app/experiment.h"
#include "frugal/cli/commands.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {

namespace {
struct ExperimentArgs {
  std::string path, out;
  std::vector<std::string> overrides, only;
  bool no_plots = false;
};
}  // namespace

void add_experiment_command(CLI::App& app) {
  auto args = std::make_shared<ExperimentArgs>();
  CLI::App* cmd = app.add_subcommand("experiment", "run a baseline and variants on the same data, "
                                     "seed and evaluation schedule, and compare them");
  cmd->add_option("experiment", args->path, "experiment file (TOML), e.g. experiments/freeze-finetune.toml")->required();
  cmd->add_option("--out", args->out, "results directory (default: runs/<experiment name>)");
  cmd->add_option("--set", args->overrides, "override a run-config key in the pretraining and every "
                  "run, after the file's own: --set train.max_steps=20 (repeatable)");
  cmd->add_flag("--no-plots", args->no_plots, "write the tables only (no gnuplot needed)");
  cmd->add_option("--only", args->only, "train only these runs (comma-separated; 'pretrain' for the "
                  "pretraining), reading the others' results from --out where an earlier invocation "
                  "finished them with the same config: a long experiment over several sittings")
      ->delimiter(',');
  cmd->callback([args] {
    const Experiment e = load_experiment(args->path, args->overrides);
    ExperimentOptions o;
    o.out_dir = args->out.empty() ? "runs/" + std::filesystem::path(args->path).stem().string() : args->out;
    o.plots = !args->no_plots;
    o.only = args->only;
    std::string sets;
    for (const std::string& s : args->overrides) sets += " --set " + s;
    o.command = fmt::format("frugal experiment {}{}{}{}{}", args->path,
                            args->out.empty() ? "" : " --out " + args->out, sets, args->no_plots ? " --no-plots" : "",
                            o.only.empty() ? "" : fmt::format(" --only {}", fmt::join(o.only, ",")));
    const ReportTable table = run_experiment(e, o);
    if (table.rows.empty())
      io::print("no run of the experiment has finished results yet; wrote {}/results.md\n", o.out_dir);
    else
      io::print("{}\nwrote {}/results.md and {}/report.md\n", markdown(table), o.out_dir, o.out_dir);
  });
}

}  // namespace frugal::cli
