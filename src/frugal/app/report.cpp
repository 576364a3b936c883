// Run comparison and report writing; see report.h.
#include "frugal/app/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"

namespace frugal {
namespace fs = std::filesystem;

std::optional<double> MetricPoint::get(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

bool RunMetrics::has(const std::string& key) const {
  for (const MetricPoint& p : points)
    if (p.values.count(key)) return true;
  return false;
}

std::vector<const MetricPoint*> RunMetrics::evals() const {
  std::vector<const MetricPoint*> out;
  for (const MetricPoint& p : points)
    if (p.val_loss) out.push_back(&p);
  return out;
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The name of a run directory, also for "runs/a/" and ".".
std::string dir_name(const std::string& run_dir) {
  fs::path p = fs::weakly_canonical(fs::absolute(run_dir));
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// A line's number (null reads as NaN, as nlohmann::json writes NaN); Error when not a number.
double number_at(const nlohmann::json& line, const char* key, const std::string& where) {
  auto it = line.find(key);
  FRUGAL_CHECK(it != line.end(), "{}: no \"{}\" key; every metrics line needs step, loss, flops and "
               "wall_s (was it written by `frugal train`?)", where, key);
  FRUGAL_CHECK(it->is_number() || it->is_null(), "{}: \"{}\" is {} where a number was expected; fix "
               "or delete the line", where, key, it->dump());
  return it->is_null() ? kNaN : it->get<double>();
}

MetricPoint parse_line(const std::string& text, const std::string& where) {
  nlohmann::json line;
  try {
    line = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON (error at byte {} of the line); fix or delete the line (a run killed "
         "while writing can leave a cut-off last line)", where, e.byte);
  }
  FRUGAL_CHECK(line.is_object(), "{}: a metrics line must be a JSON object, found {}", where,
               line.type_name());
  MetricPoint p;
  const auto step = line.find("step");
  FRUGAL_CHECK(step != line.end() && step->is_number_integer(), "{}: \"step\" is {}; every "
               "metrics line needs an integer step", where, step == line.end() ? "missing" : step->dump());
  p.step = step->get<int64_t>();
  p.loss = number_at(line, "loss", where);
  p.flops = number_at(line, "flops", where);
  p.wall_s = number_at(line, "wall_s", where);
  if (line.contains("val_loss")) p.val_loss = number_at(line, "val_loss", where);
  for (const auto& [key, value] : line.items()) {
    if (value.is_number()) p.values[key] = value.get<double>();
    else if (value.is_boolean()) p.values[key] = value.get<bool>() ? 1.0 : 0.0;
    else if (value.is_null()) p.values[key] = kNaN;
  }
  return p;
}

}  // namespace

RunMetrics read_run(const std::string& run_dir) {
  FRUGAL_CHECK(fs::is_directory(run_dir), "run directory {} does not exist; pass the train.out_dir "
               "of a `frugal train` run", run_dir);
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  FRUGAL_CHECK(fs::exists(path), "{} not found: {} is not a run directory written by `frugal train` "
               "(check the path, or wait until the run has started)", path, run_dir);
  std::ifstream in(path);
  FRUGAL_CHECK(in.good(), "cannot read {}; check its permissions", path);
  RunMetrics run{dir_name(run_dir), run_dir, {}};
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line: no data
    const std::string where = fmt::format("{}:{}", path, line_no);
    MetricPoint p = parse_line(text, where);
    FRUGAL_CHECK(run.points.empty() || p.step > run.points.back().step, "{}: step {} does not come "
                 "after step {} of the line before; the file mixes two runs (delete the stale lines)",
                 where, p.step, run.points.back().step);
    run.points.push_back(std::move(p));
  }
  FRUGAL_CHECK(!in.bad(), "reading {} failed", path);
  return run;
}

std::optional<Crossing> first_crossing(const RunMetrics& run, double target) {
  const auto evals = run.evals();
  for (size_t i = 0; i < evals.size(); ++i) {
    const MetricPoint& hit = *evals[i];
    if (!(*hit.val_loss <= target)) continue;  // also skips NaN
    const Crossing at{double(hit.step), hit.wall_s, hit.flops};
    if (i == 0 || !std::isfinite(*evals[i - 1]->val_loss)) return at;
    const MetricPoint& before = *evals[i - 1];
    // before.val_loss > target >= hit.val_loss, so the fraction is in (0, 1].
    const double f = (*before.val_loss - target) / (*before.val_loss - *hit.val_loss);
    auto lerp = [f](double a, double b) { return a + f * (b - a); };
    return Crossing{lerp(double(before.step), at.step), lerp(before.wall_s, at.wall_s),
                    lerp(before.flops, at.flops)};
  }
  return std::nullopt;
}

bool ReportTable::several_baselines() const {
  return std::any_of(rows.begin(), rows.end(), [](const ReportRow& r) { return r.baseline != 0; });
}

ReportTable compare_runs(const std::vector<RunMetrics>& runs, std::optional<double> target,
                         const std::vector<size_t>& baselines) {
  FRUGAL_CHECK(!runs.empty(), "no runs to compare; pass at least one run directory");
  for (const RunMetrics& r : runs)
    FRUGAL_CHECK(!r.points.empty(), "run {} ({}) has no metrics lines yet; wait until it has logged "
                 "or leave it out", r.name, r.dir);
  FRUGAL_CHECK(baselines.empty() || baselines.size() == runs.size(), "{} baselines given for {} runs; "
               "give one per run", baselines.size(), runs.size());
  auto baseline_of = [&](size_t i) { return baselines.empty() ? size_t{0} : baselines[i]; };
  for (size_t i = 0; i < runs.size(); ++i) {
    const size_t b = baseline_of(i);
    FRUGAL_CHECK(b < runs.size(), "run {}'s baseline is position {}, past the {} runs given", runs[i].name,
                 b + 1, runs.size());
    FRUGAL_CHECK(baseline_of(b) == b, "run {} is the baseline of {} and so must be its own, not "
                 "compared with {}", runs[b].name, runs[i].name, runs[baseline_of(b)].name);
  }
  FRUGAL_CHECK(baseline_of(0) == 0, "the first run ({}) is the first baseline", runs[0].name);
  // Each baseline's target: the given one, or its final validation loss.
  std::vector<double> targets(runs.size(), kNaN);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (baseline_of(i) != i) continue;
    if (target) {
      targets[i] = *target;
      continue;
    }
    const auto evals = runs[i].evals();
    FRUGAL_CHECK(!evals.empty() && std::isfinite(*evals.back()->val_loss), "the baseline run {} ({}) "
                 "has no final validation loss to use as the target; give one with --target-loss or "
                 "put a run with evaluations first", runs[i].name, runs[i].dir);
    targets[i] = *evals.back()->val_loss;
  }
  FRUGAL_CHECK(std::isfinite(targets[0]), "the target validation loss must be a finite number, got {}", targets[0]);
  ReportTable table;
  table.target_given = target.has_value();
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    ReportRow row;
    row.name = r.name;
    row.dir = r.dir;
    row.baseline = baseline_of(i);
    row.target = targets[row.baseline];
    const MetricPoint& last = r.points.back();
    row.steps = last.step;
    row.wall_s = last.wall_s;
    row.flops = last.flops;
    row.dense_flops = last.get("dense_flops");
    if (row.dense_flops && *row.dense_flops > 0) row.saved_vs_dense = 1 - row.flops / *row.dense_flops;
    const auto evals = r.evals();
    if (!evals.empty()) {
      row.final_val_loss = evals.back()->val_loss;
      row.final_val_bpb = evals.back()->get("val_bpb");
      row.final_val_accuracy = evals.back()->get("val_accuracy");
    }
    row.to_target = first_crossing(r, row.target);
    table.rows.push_back(std::move(row));
  }
  for (ReportRow& row : table.rows) {
    const ReportRow& base = table.rows[row.baseline];
    if (row.final_val_loss && base.final_val_loss) row.loss_gap = *row.final_val_loss - *base.final_val_loss;
    if (!row.to_target || !base.to_target) continue;
    if (row.to_target->wall_s > 0) row.speedup = base.to_target->wall_s / row.to_target->wall_s;
    if (base.to_target->flops > 0) row.flops_reduction = 1 - row.to_target->flops / base.to_target->flops;
  }
  return table;
}

namespace {

// FLOPs with an SI prefix: "1.23 TFLOP".
std::string format_flops(double flops) {
  static constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  int i = 0;
  while (i < 7 && std::abs(flops) >= 1000) {
    flops /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}FLOP", flops, kPrefixes[i]);
}

// A table cell: '|' would end the cell.
std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

template <class F>
std::string or_dash(const std::optional<double>& v, F format) {
  return v ? format(*v) : std::string("—");
}

}  // namespace

std::string markdown(const ReportTable& table) {
  const bool dense = std::any_of(table.rows.begin(), table.rows.end(),
                                 [](const ReportRow& r) { return r.dense_flops.has_value(); });
  const bool bpb = std::any_of(table.rows.begin(), table.rows.end(),
                               [](const ReportRow& r) { return r.final_val_bpb.has_value(); });
  const bool accuracy = std::any_of(table.rows.begin(), table.rows.end(),
                                    [](const ReportRow& r) { return r.final_val_accuracy.has_value(); });
  const bool several = table.several_baselines();
  std::string out;
  if (!several) {
    out = fmt::format("Target validation loss: **{:.4f}** ({}). Baseline: `{}`.\n\n", table.target(),
                      table.target_given ? "given" : "the baseline's final validation loss", table.rows[0].name);
  } else {  // each run against its own baseline (say, each seed against its dense run)
    std::vector<std::string> targets;
    for (size_t i = 0; i < table.rows.size(); ++i)
      if (table.rows[i].baseline == i)
        targets.push_back(fmt::format("`{}` **{:.4f}**", table.rows[i].name, table.rows[i].target));
    out = fmt::format("Each run against its baseline (column `vs`); target validation loss{}: {}.\n\n",
                      table.target_given ? " (given)" : ", the baseline's final validation loss",
                      fmt::join(targets, ", "));
  }
  out += fmt::format("| run |{} steps | final val loss |{}{} gap vs baseline | wall-clock | training FLOPs |",
                     several ? " vs |" : "", bpb ? " final val bits/byte |" : "",
                     accuracy ? " final val accuracy |" : "");
  if (dense) out += " saved vs dense |";
  out += " step at target | time to target | speed-up | FLOPs to target | FLOPs reduction |\n";
  out += fmt::format("| --- |{} ---: | ---: | ---: | ---: | ---: |", several ? " --- |" : "");
  if (bpb) out += " ---: |";
  if (accuracy) out += " ---: |";
  if (dense) out += " ---: |";
  out += " ---: | ---: | ---: | ---: | ---: |\n";
  auto seconds = [](double s) { return fmt::format("{:.1f} s", s); };
  auto percent = [](double v) { return fmt::format("{:.1f}%", 100 * v); };
  for (const ReportRow& r : table.rows) {
    out += fmt::format("| {} |{} {} | {} |{}{} {} | {} | {} |", markdown_cell(r.name),
                       several ? fmt::format(" {} |", markdown_cell(table.rows[r.baseline].name)) : "", r.steps,
                       or_dash(r.final_val_loss, [](double v) { return fmt::format("{:.4f}", v); }),
                       bpb ? fmt::format(" {} |", or_dash(r.final_val_bpb, [](double v) { return fmt::format("{:.4f}", v); })) : "",
                       accuracy ? fmt::format(" {} |", or_dash(r.final_val_accuracy, [](double v) { return fmt::format("{:.4f}", v); })) : "",
                       or_dash(r.loss_gap, [](double v) { return fmt::format("{:+.4f}", v); }),
                       seconds(r.wall_s), format_flops(r.flops));
    if (dense) {
      out += fmt::format(" {} |", or_dash(r.saved_vs_dense, percent));
    }
    if (!r.to_target) {
      out += " not reached | not reached | — | not reached | — |\n";
      continue;
    }
    out += fmt::format(" {:.0f} | {} | {} | {} | {} |\n", r.to_target->step, seconds(r.to_target->wall_s),
                       or_dash(r.speedup, [](double v) { return fmt::format("{:.3f}×", v); }),
                       format_flops(r.to_target->flops),
                       or_dash(r.flops_reduction, percent));
  }
  return out;
}

std::string levels_markdown(const std::vector<RunMetrics>& runs) {
  std::string out;
  for (const RunMetrics& r : runs) {
    const MetricPoint& last = r.points.back();
    if (!last.get("level1_steps")) continue;
    if (out.empty()) {
      out = "\n## Levels (methods.multilevel)\n\nSteps, step time (level changes included, evaluation "
            "excluded) and executed FLOPs per level, at each run's last log line.\n\n"
            "| run | level | steps | time | share of time | FLOPs | share of FLOPs |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    }
    double seconds = 0, flops = 0;
    int levels = 0;
    while (last.get(fmt::format("level{}_steps", levels + 1))) {
      ++levels;
      seconds += last.get(fmt::format("level{}_seconds", levels)).value_or(0);
      flops += last.get(fmt::format("level{}_flops", levels)).value_or(0);
    }
    for (int l = 1; l <= levels; ++l) {
      const double s = last.get(fmt::format("level{}_seconds", l)).value_or(0);
      const double f = last.get(fmt::format("level{}_flops", l)).value_or(0);
      out += fmt::format("| {} | {} | {:.0f} | {:.1f} s | {:.1f}% | {} | {:.1f}% |\n", markdown_cell(r.name), l,
                         *last.get(fmt::format("level{}_steps", l)), s, seconds > 0 ? 100 * s / seconds : 0.0,
                         format_flops(f), flops > 0 ? 100 * f / flops : 0.0);
    }
  }
  return out;
}

namespace {

// A string as a gnuplot single-quoted literal (no escapes inside except '' for ').
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string gp_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string("NaN"); }

// The gnuplot executable: `name` itself when it has a '/', else the first match in PATH.
std::optional<std::string> find_executable(const std::string& name) {
  auto usable = [](const fs::path& p) { return fs::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0; };
  if (name.find('/') != std::string::npos) return usable(name) ? std::optional(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (usable(candidate)) return candidate.string();
  }
  return std::nullopt;
}

void write_text(const fs::path& path, const std::string& text) { io::write_file_atomic(path.string(), text); }

// One line of a plot: a data file (relative to out_dir), its `using` columns, a legend title, and
// the run's index (its colour, the same in every plot).
struct Series {
  std::string file, columns, title;
  size_t run = 0;
  std::string style;  // gnuplot `with ...`; empty: the plot's
};

struct Plot {
  const char* name;
  std::string title, xlabel, ylabel;
  bool log_x = false;
  std::string style;            // gnuplot `with ...`
  std::vector<Series> series;
  std::optional<double> hline;  // dashed target line
};

constexpr const char* kTargetStyle = "dashtype 2 linecolor 'gray40' linewidth 1.5";

// The gnuplot commands that draw `plot` to <name>.png and <name>.svg.
std::string plot_script(const Plot& plot) {
  std::string s = fmt::format("set title {}\nset xlabel {}\nset ylabel {}\nunset logscale\nunset arrow\n",
                              gp_quote(plot.title), gp_quote(plot.xlabel), gp_quote(plot.ylabel));
  if (plot.hline) {  // a function only spans the data's x range, the arrow the whole width
    s += fmt::format("set arrow from graph 0, first {0} to graph 1, first {0} nohead {1}\n",
                     gp_number(*plot.hline), kTargetStyle);
  }
  s += plot.log_x ? "set logscale x\nset format x '%.0e'\n" : "set format x '% h'\n";
  s += "set terminal pngcairo noenhanced size 1000,640 font 'sans,11'\n";
  s += fmt::format("set output {}\nplot ", gp_quote(std::string(plot.name) + ".png"));
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const Series& line = plot.series[i];
    s += fmt::format("{}{} using {} with {} linecolor {} title {}", i ? ", \\\n     " : "",
                     gp_quote(line.file), line.columns, line.style.empty() ? plot.style : line.style,
                     line.run + 1, gp_quote(line.title));
  }
  if (plot.hline) {  // as a function too: the y range takes it in, and it has a legend entry
    s += fmt::format(", \\\n     {} with lines {} title {}", gp_number(*plot.hline), kTargetStyle,
                     gp_quote(fmt::format("target {:.4f}", *plot.hline)));
  }
  s += "\nset terminal svg noenhanced size 1000,640 font 'sans,11' background '#ffffff'\n";
  s += fmt::format("set output {}\nreplot\nunset output\n\n", gp_quote(std::string(plot.name) + ".svg"));
  return s;
}

constexpr const char* kPlotDataDir = "plot-data";  // under out_dir

// Writes plot-data/run<i>_{train,val,flip}.dat and returns the plots to draw (those with any data).
std::vector<Plot> write_plot_data(const std::vector<RunMetrics>& runs, const ReportTable& table,
                                  const fs::path& out_dir) {
  const fs::path data_dir = out_dir / kPlotDataDir;
  fs::create_directories(data_dir);
  for (const auto& entry : fs::directory_iterator(data_dir)) {  // an earlier report's, maybe more runs
    const std::string name = entry.path().filename().string();
    if (name.starts_with("run") && name.ends_with(".dat")) fs::remove(entry.path());
  }
  Plot val_wall{kPlotValVsWall, "Validation loss vs wall-clock", "wall-clock (s)", "validation loss",
                false, "linespoints pointtype 7 pointsize 0.7 linewidth 2", {}, table.target()};
  Plot val_flops{kPlotValVsFlops, "Validation loss vs training FLOPs", "training FLOPs (log scale)",
                 "validation loss", true, val_wall.style, {}, table.target()};
  Plot train{kPlotTrainVsStep, "Training loss vs step", "step", "training loss", false,
             "lines linewidth 1.5", {}, std::nullopt};
  // Per-step metrics some methods log, each drawn against the step when a run logs it.
  struct StepMetric {
    const char* key;
    Plot plot;
  };
  const std::string points = "linespoints pointtype 7 pointsize 0.5 linewidth 1.5";
  std::vector<StepMetric> step_metrics = {
      {"flip_rate", {kPlotFlipVsStep, "2:4 mask flip rate vs step", "step", "flip rate", false, points, {}, std::nullopt}},
      {"level", {kPlotLevelVsStep, "Multi-level: level trained vs step (1 = the configured model)", "step",
                 "level", false, "steps linewidth 2", {}, std::nullopt}},
      {"sparsity", {kPlotSparsityVsStep, "Sparsity of the block linears vs step (Mixed Sparsity Training)", "step",
                    "sparsity", false, "steps linewidth 2", {}, std::nullopt}},
      {"moe_max_over_mean_load", {kPlotLoadVsStep, "Mixture of experts: max/mean expert load vs step (worst block; 1 = balanced)",
                                  "step", "max / mean load", false, points, {}, std::nullopt}}};
  // A pipeline's throughput over time, with a marker where its layout changed (a re-partition).
  // Every validation set of every run, one line each: its loss, and its bits per byte.
  Plot val_sets{kPlotValSetsVsStep, "Validation loss of each validation set vs step", "step", "validation loss",
                false, points, {}, std::nullopt};
  Plot bpb{kPlotBpbVsStep, "Validation bits per byte vs step (comparable across tokenizers)", "step",
           "bits per byte", false, points, {}, std::nullopt};
  Plot bpb_wall{kPlotBpbVsWall, "Validation bits per byte vs wall-clock (comparable across tokenizers)",
                "wall-clock (s)", "bits per byte", false, points, {}, std::nullopt};
  Plot throughput{kPlotThroughputVsWall, "Training throughput vs wall-clock (large points: pipeline re-partitions)",
                  "wall-clock (s)", "tokens/s", false, "lines linewidth 1.5", {}, std::nullopt};
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& run = runs[i];
    std::string val = "# step wall_s flops val_loss\n", loss = "# step loss\n";
    for (const MetricPoint& p : run.points) {
      loss += fmt::format("{} {}\n", p.step, gp_number(p.loss));
      if (p.val_loss) {
        val += fmt::format("{} {} {} {}\n", p.step, gp_number(p.wall_s), gp_number(p.flops),
                           gp_number(*p.val_loss));
      }
    }
    auto add = [&](Plot& plot, const std::string& kind, const std::string& text, const char* columns) {
      const std::string file = fmt::format("{}/run{}_{}.dat", kPlotDataDir, i, kind);
      write_text(out_dir / file, text);
      plot.series.push_back({file, columns, run.name, i});
    };
    add(train, "train", loss, "1:2");
    if (!run.evals().empty()) {
      add(val_wall, "val", val, "2:4");
      val_flops.series.push_back({val_wall.series.back().file, "3:4", run.name, i});
    }
    if (run.has("pipeline_repartitions") && run.has("tokens_per_s")) {
      std::string text = "# wall_s tokens_per_s\n", changes = "# wall_s tokens_per_s stages replicas\n";
      double done = 0;  // re-partitions before the point
      for (const MetricPoint& p : run.points) {
        const auto tokens = p.get("tokens_per_s"), count = p.get("pipeline_repartitions");
        if (!tokens || !count) continue;
        text += fmt::format("{} {}\n", gp_number(p.wall_s), gp_number(*tokens));
        if (*count > done)
          changes += fmt::format("{} {} {} {}\n", gp_number(p.wall_s), gp_number(*tokens),
                                 p.get("pipeline_stages").value_or(0), p.get("pipeline_replicas").value_or(0));
        done = *count;
      }
      add(throughput, "throughput", text, "1:2");
      add(throughput, "repartitions", changes, "1:2");
      throughput.series.back().title = run.name + ": re-partition";
      throughput.series.back().style = "points pointtype 7 pointsize 2";
    }
    // val_loss and val_loss/NAME (data.val), likewise val_bpb: the keys this run logged.
    for (const auto& [prefix, plot] : {std::pair<std::string, Plot*>{"val_loss", &val_sets}, {"val_bpb", &bpb}}) {
      std::set<std::string> keys;
      for (const MetricPoint& p : run.points)
        for (const auto& [key, value] : p.values)
          if (key == prefix || key.starts_with(prefix + "/")) keys.insert(key);
      if (keys.size() < (prefix == "val_loss" ? 2u : 1u)) continue;  // one set's loss is val_wall's already
      int dash = 0;  // each set of a run its dash pattern, in the run's colour
      for (const std::string& key : keys) {
        const std::string set = key == prefix ? "val" : key.substr(prefix.size() + 1);
        std::string text = fmt::format("# step wall_s {}\n", key);
        for (const MetricPoint& p : run.points)
          if (auto v = p.get(key)) text += fmt::format("{} {} {}\n", p.step, gp_number(p.wall_s), gp_number(*v));
        const std::string file = fmt::format("{}/run{}_{}.dat", kPlotDataDir, i, key == prefix ? prefix : prefix + "_" + set);
        write_text(out_dir / file, text);
        const std::string style = fmt::format("{} dashtype {}", points, ++dash);
        plot->series.push_back({file, "1:3", run.name + ": " + set, i, style});
        if (plot == &bpb) bpb_wall.series.push_back({file, "2:3", run.name + ": " + set, i, style});
      }
    }
    for (StepMetric& m : step_metrics) {
      if (!run.has(m.key)) continue;
      std::string text = fmt::format("# step {}\n", m.key);
      for (const MetricPoint& p : run.points)
        if (auto v = p.get(m.key)) text += fmt::format("{} {}\n", p.step, gp_number(*v));
      add(m.plot, m.key, text, "1:2");
    }
  }
  std::vector<Plot> plots;
  for (Plot* p : {&val_wall, &val_flops, &train, &throughput, &val_sets, &bpb, &bpb_wall})
    if (!p->series.empty()) plots.push_back(std::move(*p));
  for (StepMetric& m : step_metrics)
    if (!m.plot.series.empty()) plots.push_back(std::move(m.plot));
  return plots;
}

// Runs `gnuplot plots.gp` in out_dir, its output going to out_dir/gnuplot.log.
void run_gnuplot(const std::string& gnuplot, const fs::path& out_dir) {
  const std::string dir = out_dir.string(), log = (out_dir / "gnuplot.log").string();
  const pid_t pid = ::fork();
  FRUGAL_CHECK(pid >= 0, "cannot start gnuplot (fork failed: {})", std::strerror(errno));
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::chdir(dir.c_str()) != 0) ::_exit(126);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);  // the frugal binary ignores it; gnuplot gets the usual default
    ::execl(gnuplot.c_str(), "gnuplot", "plots.gp", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fail("gnuplot ({}) failed on {}/plots.gp ({}): {}", gnuplot, dir,
       WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status)) : std::string("killed by a signal"),
       output.empty() ? std::string("no output") : output.substr(output.size() > 2000 ? output.size() - 2000 : 0));
}

}  // namespace

ReportTable write_report(const std::vector<RunMetrics>& runs_in, const std::string& out_dir,
                         const ReportOptions& options) {
  std::vector<RunMetrics> runs = runs_in;
  if (!options.names.empty()) {
    FRUGAL_CHECK(options.names.size() == runs.size(), "{} names given for {} runs; give one name per "
                 "run directory, in the same order", options.names.size(), runs.size());
    for (size_t i = 0; i < runs.size(); ++i) runs[i].name = options.names[i];
  }
  const ReportTable table = compare_runs(runs, options.target_loss, options.baselines);
  std::optional<std::string> gnuplot;
  if (options.plots) {
    gnuplot = find_executable(options.gnuplot);
    FRUGAL_CHECK(gnuplot.has_value(), "gnuplot ({}) not found; install it (Debian: apt-get install "
                 "gnuplot-nox) or write the table only (--no-plots)", options.gnuplot);
  }
  const fs::path out(out_dir);
  io::create_directories(out_dir, "the report directory (--out)");
  std::string md = "# Run comparison\n\n" + markdown(table) + levels_markdown(runs) + "\nRun directories:\n\n";
  for (const ReportRow& r : table.rows) md += fmt::format("- `{}`: `{}`\n", r.name, r.dir);
  if (gnuplot) {
    const std::vector<Plot> plots = write_plot_data(runs, table, out);
    std::string script = "# Generated by `frugal report`; run `gnuplot plots.gp` in this directory.\n"
                         "set grid\nset key top right box opaque\n\n";
    for (const Plot& p : plots) script += plot_script(p);
    write_text(out / "plots.gp", script);
    for (const char* name : kPlotNames)
      for (const char* ext : {".png", ".svg"}) fs::remove(out / (std::string(name) + ext));  // stale
    run_gnuplot(*gnuplot, out);
    md += "\n## Plots\n";
    for (const Plot& p : plots) {
      for (const char* ext : {".png", ".svg"}) {
        const fs::path file = out / (std::string(p.name) + ext);
        FRUGAL_CHECK(fs::is_regular_file(file) && fs::file_size(file) > 0, "gnuplot did not write {}; "
                     "see {}", file.string(), (out / "gnuplot.log").string());
      }
      md += fmt::format("\n### {}\n\n![{}]({}.png)\n\n[SVG]({}.svg)\n", p.title, p.title, p.name, p.name);
    }
  }
  write_text(out / "report.md", md);
  return table;
}

ReportTable write_report(const std::vector<std::string>& run_dirs, const std::string& out_dir,
                         const ReportOptions& options) {
  std::vector<RunMetrics> runs;
  for (const std::string& dir : run_dirs) runs.push_back(read_run(dir));
  return write_report(runs, out_dir, options);
}

}  // namespace frugal
