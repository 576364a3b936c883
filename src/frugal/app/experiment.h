// Experiments: `frugal experiment EXPERIMENT.toml` runs a baseline and its variants on the same
// data, seed and evaluation schedule, one after another with all threads, then writes the
// comparison (report.md with plots, results.md). File format (see docs/commands/experiment.md):
//   description = "..."            # optional
//   target_loss = 1.60             # optional; default: the baseline's final validation loss
//   [base]                         # run-config overrides shared by every run (tables or dotted keys)
//   [pretrain]                     # optional dense run; runs start from its final checkpoint
//   steps = 400
//   set = ["data.dir=..."]
//   [[run]]                        # the first run is the baseline
//   name = "no-freeze"
//   set = ["methods.freeze.alpha=0.33"]
//   pretrained = true              # default true when [pretrain] exists; false: from scratch
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/app/report.h"
#include "frugal/io/config.h"

namespace frugal {

struct ExperimentRun {
  std::string name;
  std::vector<std::string> overrides;  // "key=value"
  bool pretrained = true;
  std::string baseline;  // the run this one is compared with in the report; empty: the first run
};

struct Experiment {
  std::string path, description;
  std::string base_toml;  // the [base] table as TOML text
  int64_t pretrain_steps = 0;  // 0: no pretraining
  std::vector<std::string> pretrain_overrides;
  std::optional<double> target_loss;
  std::vector<ExperimentRun> runs;
  // "key=value" from the command line (`--set`), applied last to the pretraining and every run:
  // `--set train.max_steps=20` shortens them all, for a quick check of an experiment.
  std::vector<std::string> overrides;
};

// Parses and checks an experiment file with the command line's overrides: every run's config is
// resolved and given `frugal train`'s checks before data (run_settings), so a bad key or value
// fails before anything trains. Throws Error naming the file, the run and the problem.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides = {});

// Each run's baseline as an index into e.runs (compare_runs' `baselines`): the run its `baseline`
// key names; a run that the first run or a `baseline` key names is its own; any other, the first.
// Throws Error when a name is not a run of the file, or a baseline has a baseline key naming
// another run.
std::vector<size_t> baseline_indices(const Experiment& e);

// The resolved run config of a run (nullptr: the pretraining run) writing to out_dir.
io::Config experiment_config(const Experiment& e, const ExperimentRun* run, const std::string& out_dir);

struct ExperimentOptions {
  std::string out_dir;   // one run directory per run (and `pretrain`), report.md, results.md
  std::string command;   // the command line, recorded in results.md
  bool plots = true;
  bool quiet = false;    // no training progress output
  // Train only these runs ("pretrain" for the pretraining); empty: all. The others' results are
  // read from out_dir where an earlier invocation finished them with today's config.
  std::vector<std::string> only;
};

// The file a finished run's directory gets, holding the config the experiment trained it with: a
// later invocation with --only reads the run's results instead of training it while they match.
inline constexpr const char* kFinishedRunFile = "experiment-finished.toml";

// Runs the pretraining (when any) and every run sequentially, then writes the report; with
// options.only, only those, the report then covering every run that has finished results (a run
// whose baseline has none is left out and named in results.md). Throws Error before training
// anything when a name in `only` is not a run, or a run to train needs a baseline or pretraining
// that neither is trained nor has finished results. Returns the comparison table.
ReportTable run_experiment(const Experiment& e, const ExperimentOptions& options);

}  // namespace frugal
