// `frugal report RUN_DIR... [--out DIR] [--target-loss X] [--names a,b,...] [--baselines 1,1,3,3]
// [--no-plots]`: compares training runs (each with a baseline: the first, or the run --baselines
// names by position), prints the table and writes report.md with plots.
#include <fmt/format.h>

#include <memory>

#include "frugal/app/report.h"
#include "frugal/cli/commands.h"
#include "frugal/io/stdout.h"

namespace frugal::cli {

namespace {
struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string out = "report";
  double target = 0;
  std::vector<std::string> names;
  std::vector<size_t> baselines;  // 1-based positions
  bool no_plots = false;
};
}  // namespace

void add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand("report", "compare training runs: table of loss, time and FLOPs "
                                     "to a target loss, and plots");
  cmd->add_option("run_dirs", args->run_dirs, "run directories (train.out_dir); the first is the baseline")
      ->required();
  cmd->add_option("--out", args->out, "directory for report.md and the plots (default: report)");
  CLI::Option* target = cmd->add_option("--target-loss", args->target,
                                        "target validation loss (default: the baseline's final one)");
  cmd->add_option("--names", args->names, "legend names, one per run, comma-separated (default: "
                  "directory names)")->delimiter(',');
  cmd->add_option("--baselines", args->baselines, "each run's baseline by its position in the list "
                  "(1 = the first), comma-separated, one per run: 1,1,3,3 compares the second run with "
                  "the first and the fourth with the third (default: every run with the first)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-plots", args->no_plots, "write the table only (no gnuplot needed)");
  cmd->callback([args, target] {
    ReportOptions options;
    if (target->count()) options.target_loss = args->target;
    options.names = args->names;
    for (size_t position : args->baselines) options.baselines.push_back(position - 1);
    options.plots = !args->no_plots;
    const ReportTable table = write_report(args->run_dirs, args->out, options);
    io::print("{}\nwrote {}/report.md{}\n", markdown(table), args->out,
              options.plots ? " and the plots (PNG + SVG)" : "");
  });
}

}  // namespace frugal::cli
