// Run comparison: reads the metrics.jsonl of finished (or running) training runs, computes final
// validation loss, wall-clock, training FLOPs and the time / FLOPs each run needed to reach a
// target validation loss, relative to a baseline (the first run), and writes report.md with plots
// drawn by gnuplot. Used by `frugal report` and by the experiment runner.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace frugal {

// One line of metrics.jsonl. Every numeric key of the line is in `values` (JSON null, which is
// how NaN and infinities are written, reads as NaN); the keys every line must have are also
// copied into named fields.
struct MetricPoint {
  int64_t step = 0;
  double loss = 0;    // training loss
  double flops = 0;   // cumulative training FLOPs executed
  double wall_s = 0;  // seconds since the start of training
  std::optional<double> val_loss;  // on evaluation lines only
  std::map<std::string, double> values;

  std::optional<double> get(const std::string& key) const;
};

struct RunMetrics {
  std::string name;  // legend / table label; read_run sets the run directory's name
  std::string dir;
  std::vector<MetricPoint> points;  // in file order; steps strictly increase

  bool has(const std::string& key) const;  // some point has this numeric key
  std::vector<const MetricPoint*> evals() const;  // the points with val_loss
};

// Reads RUN_DIR/metrics.jsonl. Throws Error naming the file when it is missing, and file:line
// for a line that is not a JSON object, lacks step/loss/flops/wall_s, has a non-numeric value for
// one of those or val_loss, or whose step does not increase. Lines of only whitespace are allowed.
// Keys with string/array/object values are not numeric metrics and are not kept.
RunMetrics read_run(const std::string& run_dir);

// Where a run's validation loss first reaches (<=) a target: linearly interpolated between the
// evaluation before and the first evaluation at or below the target (in step, seconds and FLOPs
// alike); the first evaluation itself when already there (no earlier point to interpolate from).
struct Crossing {
  double step = 0, wall_s = 0, flops = 0;
};
std::optional<Crossing> first_crossing(const RunMetrics& run, double target);

struct ReportRow {
  std::string name, dir;
  size_t baseline = 0;                    // the row this one is compared with (itself for a baseline)
  double target = 0;                      // the validation loss to_target refers to
  int64_t steps = 0;                      // last logged step
  std::optional<double> final_val_loss;   // last evaluation
  std::optional<double> final_val_bpb;    // its bits per byte (val_bpb), when logged
  std::optional<double> final_val_accuracy;  // an encoder's masked-token accuracy (val_accuracy)
  double wall_s = 0, flops = 0;           // at the last logged line
  std::optional<double> dense_flops;      // when the run logs dense_flops (sparse / frozen methods)
  std::optional<double> saved_vs_dense;   // 1 - flops / dense_flops
  std::optional<Crossing> to_target;      // nullopt: never reached
  // Versus the row's baseline; nullopt where undefined (either side missing).
  std::optional<double> speedup;          // baseline time-to-target / this run's
  std::optional<double> flops_reduction;  // 1 - this run's FLOPs-to-target / baseline's
  std::optional<double> loss_gap;         // final val loss - baseline's
};

struct ReportTable {
  bool target_given = false;   // false: each row's target is its baseline's final validation loss
  std::vector<ReportRow> rows;  // rows[0] is a baseline
  double target() const { return rows.front().target; }  // the first baseline's: the plots' line
  bool several_baselines() const;
};

// Each run is compared with a baseline: baselines[i] is run i's index (empty: every run against
// runs[0]). A run that is some run's baseline must be its own (say, seeds each against their own
// dense run). target: default each baseline's final validation loss (Error when a baseline has no
// evaluation and no target is given).
ReportTable compare_runs(const std::vector<RunMetrics>& runs, std::optional<double> target,
                         const std::vector<size_t>& baselines = {});

// The table as GitHub markdown (a line on the target, then one row per run).
std::string markdown(const ReportTable& table);
// Per-level steps, seconds and FLOPs (with their shares) of the runs that log them (the multilevel
// method's level<N>_steps / _seconds / _flops), as a markdown section; "" when no run does.
std::string levels_markdown(const std::vector<RunMetrics>& runs);

struct ReportOptions {
  std::optional<double> target_loss;  // default: the baseline's final validation loss
  std::vector<std::string> names;     // legend names, one per run; default the directory names
  std::vector<size_t> baselines;      // each run's baseline (compare_runs); default the first run
  bool plots = true;                  // false: report.md with the table only, no gnuplot needed
  std::string gnuplot = "gnuplot";    // executable (looked up in PATH when it has no '/')
};

// Names of the plots write_report draws (each as .png and .svg), in report order.
inline constexpr const char* kPlotValVsWall = "val_loss_vs_wall_s";
inline constexpr const char* kPlotValVsFlops = "val_loss_vs_flops";
inline constexpr const char* kPlotTrainVsStep = "train_loss_vs_step";
inline constexpr const char* kPlotFlipVsStep = "flip_rate_vs_step";
inline constexpr const char* kPlotLevelVsStep = "level_vs_step";
inline constexpr const char* kPlotSparsityVsStep = "sparsity_vs_step";
inline constexpr const char* kPlotLoadVsStep = "expert_load_vs_step";
inline constexpr const char* kPlotThroughputVsWall = "tokens_per_s_vs_wall_s";
// Every validation set's loss (val_loss, val_loss/NAME), and bits per byte, against the step; bits
// per byte also against the wall-clock (runs with different tokenizers at equal time).
inline constexpr const char* kPlotValSetsVsStep = "val_sets_loss_vs_step";
inline constexpr const char* kPlotBpbVsStep = "val_bpb_vs_step";
inline constexpr const char* kPlotBpbVsWall = "val_bpb_vs_wall_s";
inline constexpr std::array<const char*, 11> kPlotNames = {kPlotValVsWall, kPlotValVsFlops, kPlotTrainVsStep,
                                                           kPlotFlipVsStep, kPlotLevelVsStep, kPlotSparsityVsStep,
                                                           kPlotLoadVsStep, kPlotThroughputVsWall,
                                                           kPlotValSetsVsStep, kPlotBpbVsStep, kPlotBpbVsWall};

// Writes OUT_DIR/report.md (table + plots) and, with options.plots, OUT_DIR/<plot>.png/.svg plus
// the gnuplot inputs (plots.gp, plot-data/run<i>_*.dat) and gnuplot's output (gnuplot.log). Plots:
// validation loss vs seconds and vs FLOPs (log x) with the target as a dashed line, training
// loss vs step, flip_rate, level, sparsity and moe_max_over_mean_load vs step when a run logs
// them, and a pipeline's tokens/s vs seconds with its re-partitions marked (runs that log
// pipeline_repartitions). Throws Error (saying `apt-get install gnuplot-nox`) before writing
// anything when gnuplot is not found. Returns the table.
ReportTable write_report(const std::vector<RunMetrics>& runs, const std::string& out_dir,
                         const ReportOptions& options);
ReportTable write_report(const std::vector<std::string>& run_dirs, const std::string& out_dir,
                         const ReportOptions& options);

}  // namespace frugal
