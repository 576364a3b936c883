// Run comparison (app/report.h) on synthetic run directories: metrics parsing and its errors,
// time / FLOPs to a target with interpolation, the markdown table, gnuplot plots, and the CLI.
#include "error_of.h"
#include "frugal/app/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "frugal/core/error.h"
#include "run_cli.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using frugal::testing::contains;
using frugal::testing::TempDir;
using namespace frugal;

namespace {

using frugal::testing::error_of;


void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A run directory with one log line per 50 steps up to 300 and an evaluation every 100 steps
// with the given validation losses; seconds = step * sec_per_step, FLOPs = step * flops_per_step.
// `extra(step)` adds keys to a line (e.g. ", \"flip_rate\": 0.1").
std::string make_run(const fs::path& dir, const std::vector<double>& val_losses, double sec_per_step,
                     double flops_per_step,
                     const std::function<std::string(int)>& extra = [](int) { return std::string(); }) {
  std::string lines;
  for (int step = 50; step <= 300; step += 50) {
    lines += fmt::format(R"({{"step": {}, "loss": {}, "lr": 0.001, "flops": {}, "wall_s": {}{})",
                         step, 4.0 - step / 150.0, step * flops_per_step, step * sec_per_step, extra(step));
    if (step % 100 == 0) lines += fmt::format(R"(, "val_loss": {})", val_losses.at(step / 100 - 1));
    lines += "}\n";
  }
  write_file(dir / "metrics.jsonl", lines);
  return dir.string();
}

}  // namespace

TEST(Report, ReadRunKeepsEveryNumericKey) {
  TempDir tmp;
  write_file(tmp.path() / "r" / "metrics.jsonl",
             R"({"step": 10, "loss": 3.5, "flops": 1e12, "wall_s": 2.5, "grad_norm": null, "frozen": true})" "\n"
             "\n"
             R"({"step": 20, "loss": 3.0, "flops": 2e12, "wall_s": 5, "val_loss": 3.1, "flip_rate": 0.25, "note": "x"})" "\n");
  const RunMetrics run = read_run(tmp.file("r"));
  EXPECT_EQ(run.name, "r");
  ASSERT_EQ(run.points.size(), 2u);
  EXPECT_EQ(run.points[0].step, 10);
  EXPECT_DOUBLE_EQ(run.points[0].flops, 1e12);
  EXPECT_DOUBLE_EQ(run.points[0].wall_s, 2.5);
  EXPECT_FALSE(run.points[0].val_loss.has_value());
  EXPECT_TRUE(std::isnan(*run.points[0].get("grad_norm")));
  EXPECT_EQ(run.points[0].get("frozen"), 1.0);
  EXPECT_EQ(run.points[1].val_loss, 3.1);
  EXPECT_EQ(run.points[1].get("flip_rate"), 0.25);
  EXPECT_FALSE(run.points[1].get("note").has_value());
  EXPECT_TRUE(run.has("flip_rate"));
  EXPECT_FALSE(run.has("dense_flops"));
  ASSERT_EQ(run.evals().size(), 1u);
  EXPECT_EQ(run.evals()[0]->step, 20);
  EXPECT_EQ(read_run(tmp.file("r") + "/").name, "r");
}

TEST(Report, TimeAndFlopsToTargetInterpolate) {
  TempDir tmp;
  // Baseline: 1 s and 1 TFLOP per step, final val loss 2.0 at step 300 (the default target).
  const auto base = read_run(make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12));
  // Twice as fast per step and half the FLOPs; crosses 2.0 two thirds of the way from step 200
  // (2.2) to step 300 (1.9): step 266.67, 133.33 s, 133.33 TFLOP.
  const auto fast = read_run(make_run(tmp.path() / "fast", {2.8, 2.2, 1.9}, 0.5, 0.5e12));
  const ReportTable t = compare_runs({base, fast}, std::nullopt);
  EXPECT_FALSE(t.target_given);
  EXPECT_DOUBLE_EQ(t.target(), 2.0);
  ASSERT_EQ(t.rows.size(), 2u);
  const ReportRow& b = t.rows[0];
  ASSERT_TRUE(b.to_target);
  EXPECT_DOUBLE_EQ(b.to_target->step, 300);
  EXPECT_DOUBLE_EQ(b.to_target->wall_s, 300);
  EXPECT_DOUBLE_EQ(*b.speedup, 1.0);
  EXPECT_DOUBLE_EQ(*b.loss_gap, 0.0);
  const ReportRow& f = t.rows[1];
  EXPECT_EQ(f.name, "fast");
  EXPECT_EQ(f.steps, 300);
  EXPECT_DOUBLE_EQ(*f.final_val_loss, 1.9);
  EXPECT_DOUBLE_EQ(f.wall_s, 150);
  EXPECT_DOUBLE_EQ(f.flops, 150e12);
  ASSERT_TRUE(f.to_target);
  EXPECT_NEAR(f.to_target->step, 800.0 / 3, 1e-9);
  EXPECT_NEAR(f.to_target->wall_s, 400.0 / 3, 1e-9);
  EXPECT_NEAR(f.to_target->flops, 400e12 / 3, 1e-3);
  EXPECT_NEAR(*f.speedup, 300 / (400.0 / 3), 1e-12);         // 2.25x
  EXPECT_NEAR(*f.flops_reduction, 1 - (400.0 / 3) / 300, 1e-12);  // 55.6% fewer
  EXPECT_NEAR(*f.loss_gap, -0.1, 1e-12);

  const std::string md = markdown(t);
  EXPECT_TRUE(contains(md, "**2.0000** (the baseline's final validation loss)")) << md;
  EXPECT_TRUE(contains(md, "| fast | 300 | 1.9000 | -0.1000 | 150.0 s | 150 TFLOP | 267 | 133.3 s | "
                           "2.250× | 133 TFLOP | 55.6% |")) << md;
}

TEST(Report, EachRunAgainstItsOwnBaseline) {
  TempDir tmp;
  // Two seeds: each method run is measured against its own seed's dense run.
  const auto base1 = read_run(make_run(tmp.path() / "base1", {3.0, 2.5, 2.0}, 1.0, 1e12));
  const auto fast1 = read_run(make_run(tmp.path() / "fast1", {2.8, 2.2, 1.9}, 0.5, 0.5e12));
  const auto base2 = read_run(make_run(tmp.path() / "base2", {3.0, 2.6, 2.2}, 1.0, 1e12));
  const auto fast2 = read_run(make_run(tmp.path() / "fast2", {2.8, 2.2, 1.9}, 0.5, 0.5e12));
  const ReportTable t = compare_runs({base1, fast1, base2, fast2}, std::nullopt, {0, 0, 2, 2});
  EXPECT_TRUE(t.several_baselines());
  EXPECT_DOUBLE_EQ(t.target(), 2.0);
  EXPECT_DOUBLE_EQ(t.rows[1].target, 2.0);
  EXPECT_NEAR(*t.rows[1].speedup, 300 / (400.0 / 3), 1e-12);  // as against base1 alone
  // fast2 against base2's 2.2: at step 200 (2.2), 100 s, against base2's 300 s.
  EXPECT_EQ(t.rows[3].baseline, 2u);
  EXPECT_DOUBLE_EQ(t.rows[3].target, 2.2);
  EXPECT_DOUBLE_EQ(t.rows[3].to_target->wall_s, 100);
  EXPECT_DOUBLE_EQ(*t.rows[3].speedup, 3.0);
  EXPECT_NEAR(*t.rows[3].loss_gap, -0.3, 1e-12);
  EXPECT_DOUBLE_EQ(*t.rows[2].speedup, 1.0);  // a baseline against itself
  const std::string md = markdown(t);
  EXPECT_TRUE(contains(md, "`base1` **2.0000**, `base2` **2.2000**")) << md;
  EXPECT_TRUE(contains(md, "| fast2 | base2 | 300 | 1.9000 | -0.3000 |")) << md;
  // One baseline: the table keeps its single-baseline form.
  EXPECT_FALSE(contains(markdown(compare_runs({base1, fast1}, std::nullopt, {0, 0})), "| vs |"));
  // A baseline compared with another run, the first run not a baseline, a count or a position off.
  EXPECT_TRUE(contains(error_of([&] { compare_runs({base1, fast1, base2}, std::nullopt, {0, 0, 1}); }),
                       "fast1 is the baseline of base2 and so must be its own"));
  EXPECT_TRUE(contains(error_of([&] { compare_runs({base1, fast1}, std::nullopt, {1, 1}); }),
                       "the first run (base1) is the first baseline"));
  EXPECT_TRUE(contains(error_of([&] { compare_runs({base1, fast1}, std::nullopt, {0}); }),
                       "1 baselines given for 2 runs"));
  EXPECT_TRUE(contains(error_of([&] { compare_runs({base1, fast1}, std::nullopt, {0, 5}); }),
                       "position 6, past the 2 runs"));
}

TEST(Report, GivenTargetHitExactlyOrAtFirstEvaluation) {
  TempDir tmp;
  const auto run = read_run(make_run(tmp.path() / "r", {3.0, 2.5, 2.0}, 2.0, 1e12));
  // Exactly the loss of step 200: no extrapolation past it.
  auto at = first_crossing(run, 2.5);
  ASSERT_TRUE(at);
  EXPECT_DOUBLE_EQ(at->step, 200);
  EXPECT_DOUBLE_EQ(at->wall_s, 400);
  // Already below at the first evaluation: that evaluation, nothing earlier to interpolate from.
  at = first_crossing(run, 3.5);
  ASSERT_TRUE(at);
  EXPECT_DOUBLE_EQ(at->step, 100);
  EXPECT_DOUBLE_EQ(at->flops, 100e12);
  const ReportTable t = compare_runs({run}, 2.75);
  EXPECT_TRUE(t.target_given);
  EXPECT_DOUBLE_EQ(t.rows[0].to_target->step, 150);
}

TEST(Report, NotReached) {
  TempDir tmp;
  const auto base = read_run(make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12));
  const auto slow = read_run(make_run(tmp.path() / "slow", {2.9, 2.6, 2.3}, 1.0, 1e12));
  ReportTable t = compare_runs({base, slow}, std::nullopt);
  EXPECT_FALSE(t.rows[1].to_target);
  EXPECT_FALSE(t.rows[1].speedup);
  EXPECT_FALSE(t.rows[1].flops_reduction);
  EXPECT_NEAR(*t.rows[1].loss_gap, 0.3, 1e-12);
  EXPECT_TRUE(contains(markdown(t), "| slow | 300 | 2.3000 | +0.3000 | 300.0 s | 300 TFLOP | not reached | "
                                    "not reached | — | not reached | — |")) << markdown(t);
  // A target below the baseline's losses: nobody reaches it, no ratios.
  t = compare_runs({base, slow}, 1.0);
  EXPECT_FALSE(t.rows[0].to_target);
  EXPECT_FALSE(t.rows[0].speedup);
}

TEST(Report, DenseFlopsSaving) {
  TempDir tmp;
  const auto base = read_run(make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12));
  const auto sparse = read_run(make_run(tmp.path() / "sparse", {3.0, 2.5, 2.0}, 1.0, 0.75e12, [](int step) {
    return fmt::format(", \"dense_flops\": {}", step * 1e12);
  }));
  const ReportTable t = compare_runs({base, sparse}, std::nullopt);
  EXPECT_FALSE(t.rows[0].saved_vs_dense);
  EXPECT_NEAR(*t.rows[1].saved_vs_dense, 0.25, 1e-12);
  EXPECT_TRUE(contains(markdown(t), "| saved vs dense |"));
  EXPECT_TRUE(contains(markdown(t), "| 225 TFLOP | 25.0% |")) << markdown(t);
}

// Encoders log their masked-token accuracy at each evaluation: a column of its final value, for
// every run that logged it (a dash for one that did not), and none when no run did.
TEST(Report, MaskedTokenAccuracyColumn) {
  TempDir tmp;
  const auto base = read_run(make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12));
  const auto encoder = read_run(make_run(tmp.path() / "encoder", {2.9, 2.4, 1.9}, 1.0, 1e12, [](int step) {
    return step % 100 == 0 ? fmt::format(", \"val_accuracy\": {}", step / 1000.0) : std::string();
  }));
  const ReportTable t = compare_runs({base, encoder}, std::nullopt);
  EXPECT_NEAR(*t.rows[1].final_val_accuracy, 0.3, 1e-12);
  EXPECT_TRUE(contains(markdown(t), "| final val accuracy |")) << markdown(t);
  EXPECT_TRUE(contains(markdown(t), "| encoder | 300 | 1.9000 | 0.3000 | -0.1000 |")) << markdown(t);
  EXPECT_TRUE(contains(markdown(t), "| base | 300 | 2.0000 | — | +0.0000 |")) << markdown(t);
  EXPECT_FALSE(contains(markdown(compare_runs({base}, std::nullopt)), "accuracy")) << markdown(t);
}

TEST(Report, MalformedLinesNameFileAndLine) {
  TempDir tmp;
  const std::string good = R"({"step": 1, "loss": 3, "flops": 1, "wall_s": 1})" "\n";
  struct Case {
    std::string second_line, message;
  };
  for (const Case& c : {Case{R"({"step": 2, "loss": 3, "flops": 2, "wall_s")", "not valid JSON"},
                        Case{"[1, 2]", "must be a JSON object"},
                        Case{R"({"step": 2, "loss": 3, "flops": 2})", "no \"wall_s\" key"},
                        Case{R"({"step": 2.5, "loss": 3, "flops": 2, "wall_s": 2})", "integer step"},
                        Case{R"({"step": 2, "loss": "3", "flops": 2, "wall_s": 2})", "\"loss\" is \"3\""},
                        Case{R"({"step": 2, "loss": 3, "flops": 2, "wall_s": 2, "val_loss": [1]})", "\"val_loss\""},
                        Case{R"({"step": 1, "loss": 3, "flops": 2, "wall_s": 2})", "does not come after step 1"}}) {
    write_file(tmp.path() / "r" / "metrics.jsonl", good + c.second_line + "\n" + good);
    const std::string msg = error_of([&] { read_run(tmp.file("r")); });
    EXPECT_TRUE(contains(msg, tmp.file("r") + "/metrics.jsonl:2:")) << msg;
    EXPECT_TRUE(contains(msg, c.message)) << msg;
  }
}

TEST(Report, MissingRunErrors) {
  TempDir tmp;
  std::string msg = error_of([&] { read_run(tmp.file("nope")); });
  EXPECT_TRUE(contains(msg, "run directory " + tmp.file("nope") + " does not exist")) << msg;
  fs::create_directories(tmp.path() / "empty");
  msg = error_of([&] { read_run(tmp.file("empty")); });
  EXPECT_TRUE(contains(msg, tmp.file("empty") + "/metrics.jsonl not found")) << msg;
  // A run that has not logged yet, and a baseline without evaluations.
  write_file(tmp.path() / "empty" / "metrics.jsonl", "");
  msg = error_of([&] { compare_runs({read_run(tmp.file("empty"))}, 2.0); });
  EXPECT_TRUE(contains(msg, "has no metrics lines yet")) << msg;
  write_file(tmp.path() / "noeval" / "metrics.jsonl", R"({"step": 1, "loss": 3, "flops": 1, "wall_s": 1})" "\n");
  msg = error_of([&] { compare_runs({read_run(tmp.file("noeval"))}, std::nullopt); });
  EXPECT_TRUE(contains(msg, "--target-loss")) << msg;
}

TEST(Report, MissingGnuplotSaysHowToInstall) {
  TempDir tmp;
  const std::string run = make_run(tmp.path() / "r", {3.0, 2.5, 2.0}, 1.0, 1e12);
  ReportOptions options;
  options.gnuplot = tmp.file("no-such-gnuplot");
  const std::string msg = error_of([&] { write_report({run}, tmp.file("out"), options); });
  EXPECT_TRUE(contains(msg, "apt-get install gnuplot-nox")) << msg;
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
  options.plots = false;  // the table alone needs no gnuplot
  write_report({run}, tmp.file("out"), options);
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "report.md"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "plots.gp"));
}

TEST(Report, LevelsTableSumsEachLevelOfAMultiLevelRun) {
  TempDir tmp;
  const RunMetrics dense = read_run(make_run(tmp.path() / "dense", {3.0, 2.5, 2.0}, 1.0, 1e12));
  // Level 1 for steps 1-50 and 201-300 (1 s, 1 TFLOP each), level 2 for 51-200 (0.25 s, 0.125 TFLOP).
  const RunMetrics cycle = read_run(make_run(tmp.path() / "cycle", {3.0, 2.5, 2.0}, 0.6, 0.5e12, [](int step) {
    const int l1 = std::min(step, 50) + std::max(0, step - 200), l2 = std::clamp(step - 50, 0, 150);
    return fmt::format(R"(, "level": {}, "level1_steps": {}, "level1_seconds": {}, "level1_flops": {})"
                       R"(, "level2_steps": {}, "level2_seconds": {}, "level2_flops": {})",
                       step > 50 && step <= 200 ? 2 : 1, l1, l1 * 1.0, l1 * 1e12, l2, l2 * 0.25, l2 * 0.125e12);
  }));
  EXPECT_EQ(levels_markdown({dense}), "");
  const std::string md = levels_markdown({dense, cycle});
  EXPECT_TRUE(contains(md, "| cycle | 1 | 150 | 150.0 s | 80.0% | 150 TFLOP | 88.9% |")) << md;
  EXPECT_TRUE(contains(md, "| cycle | 2 | 150 | 37.5 s | 20.0% | 18.8 TFLOP | 11.1% |")) << md;
  EXPECT_FALSE(contains(md, "| dense |")) << md;
}

TEST(Report, WritesPngAndSvgPlots) {
  TempDir tmp;
  ReportOptions options;
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const std::string base = make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12);
  const std::string sparse = make_run(tmp.path() / "sparse", {2.9, 2.4, 2.1}, 0.8, 0.5e12, [](int step) {
    return fmt::format(", \"flip_rate\": {}, \"level\": {}, \"sparsity\": {}, \"tokens_per_s\": {}, "
                       "\"pipeline_stages\": {}, \"pipeline_replicas\": {}, \"pipeline_repartitions\": {}, "
                       "\"moe_max_over_mean_load\": {}", 0.1 / step,
                       step > 100 ? 1 : 2, step > 100 ? 0.9 : 0.5, step > 100 ? 2000 : 1000, step > 100 ? 1 : 2,
                       step > 100 ? 2 : 1, step > 100 ? 1 : 0, 1.0 + 1.0 / step) +
           // a second validation set (data.val) and bits per byte, at the evaluations
           (step % 100 == 0 ? fmt::format(R"(, "val_bpb": {}, "val_loss/wiki": {}, "val_bpb/wiki": {})",
                                          3.0 - step / 300.0, 3.5 - step / 200.0, 4.0 - step / 200.0) : "");
  });
  options.names = {"dense baseline", "2:4 it's_sparse"};  // spaces, quote, underscore in legends
  write_report({base, sparse}, tmp.file("out"), options);
  // One re-partition marker: where the sparse run's layout went from 2 × 1 to 1 × 2.
  std::ifstream markers(tmp.path() / "out" / "plot-data" / "run1_repartitions.dat");
  const std::string marker_text((std::istreambuf_iterator<char>(markers)), {});
  EXPECT_EQ(std::count(marker_text.begin(), marker_text.end(), '\n'), 2) << marker_text;
  EXPECT_TRUE(contains(marker_text, " 2000 1 2\n")) << marker_text;
  for (const char* plot : kPlotNames) {
    const fs::path png = tmp.path() / "out" / (std::string(plot) + ".png");
    const fs::path svg = tmp.path() / "out" / (std::string(plot) + ".svg");
    ASSERT_TRUE(fs::exists(png) && fs::exists(svg)) << plot;
    std::ifstream png_in(png, std::ios::binary), svg_in(svg);
    const std::string png_bytes((std::istreambuf_iterator<char>(png_in)), {});
    const std::string svg_text((std::istreambuf_iterator<char>(svg_in)), {});
    EXPECT_EQ(png_bytes.substr(0, 4), "\x89PNG") << plot;
    EXPECT_GT(png_bytes.size(), 5000u) << plot;
    EXPECT_TRUE(contains(svg_text, "<svg")) << plot;
    EXPECT_TRUE(contains(svg_text, "it's_sparse")) << plot;  // legend text, unmangled
  }
  // Each validation set of the run is a line of its own, loss and bits per byte.
  for (const char* file : {"run1_val_loss.dat", "run1_val_loss_wiki.dat", "run1_val_bpb.dat", "run1_val_bpb_wiki.dat"})
    EXPECT_TRUE(fs::exists(tmp.path() / "out" / "plot-data" / file)) << file;
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "plot-data" / "run0_val_bpb.dat"));  // the base logs none
  std::ifstream gp_in(tmp.path() / "out" / "plots.gp");
  const std::string gp((std::istreambuf_iterator<char>(gp_in)), {});
  EXPECT_TRUE(contains(gp, "2:4 it''s_sparse: wiki")) << gp;
  std::ifstream md_in(tmp.path() / "out" / "report.md");
  const std::string md((std::istreambuf_iterator<char>(md_in)), {});
  EXPECT_TRUE(contains(md, "| dense baseline | 300 | 2.0000 | — |")) << md;
  EXPECT_TRUE(contains(md, "| 2:4 it's_sparse | 300 | 2.1000 | 2.0000 |")) << md;  // final val bits/byte
  EXPECT_TRUE(contains(md, "](flip_rate_vs_step.png)")) << md;
  // Without flip_rate there is no flip-rate plot, also none left from the report before.
  write_report({base}, tmp.file("out"), {});
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "val_loss_vs_flops.png"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "flip_rate_vs_step.png"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "level_vs_step.png"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "sparsity_vs_step.png"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "expert_load_vs_step.png"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "plot-data" / "run1_train.dat"));
}

TEST(Report, Cli) {
  TempDir tmp;
  const std::string base = make_run(tmp.path() / "base", {3.0, 2.5, 2.0}, 1.0, 1e12);
  const std::string fast = make_run(tmp.path() / "fast", {2.8, 2.2, 1.9}, 0.5, 0.5e12);
  auto run = [](const std::string& args) {
    const frugal::testing::CliResult r = frugal::testing::run_frugal("report " + args);
    return std::make_pair(r.rc, r.output);
  };
  auto [rc, out] = run(base + " " + fast + " --names a,b --target-loss 2.5 --no-plots --out " + tmp.file("o"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "**2.5000** (given)")) << out;
  EXPECT_TRUE(contains(out, "| b | 300 |")) << out;
  EXPECT_TRUE(fs::exists(tmp.path() / "o" / "report.md"));
  std::tie(rc, out) = run(base + " " + fast + " --names a --no-plots --out " + tmp.file("o"));
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "1 names given for 2 runs")) << out;
  const std::string base2 = make_run(tmp.path() / "base2", {3.0, 2.6, 2.2}, 1.0, 1e12);
  std::tie(rc, out) = run(base + " " + fast + " " + base2 + " " + fast + " --names a,b,c,d --baselines 1,1,3,3 "
                          "--no-plots --out " + tmp.file("o"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "| d | c | 300 | 1.9000 | -0.3000 |")) << out;
  std::tie(rc, out) = run(base + " " + fast + " --baselines 1,0 --no-plots --out " + tmp.file("o"));
  EXPECT_NE(rc, 0) << out;
}
