// The experiment runner: a tiny experiment (pretraining, a baseline, a freezing run and a run
// from scratch) writes one run directory per run, results.md and report.md; pretrained runs start
// from the pretraining's weights; malformed experiment files are refused with the reason, also by
// the `frugal experiment` command; an experiment or run directory in use is refused untouched;
// --only trains some runs and reads the others' finished results; every file shipped in experiments/ loads.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frugal/app/experiment.h"
#include "frugal/app/report.h"
#include "frugal/core/error.h"
#include "frugal/io/dir_lock.h"
#include "frugal/train/run_config.h"
#include "error_of.h"
#include "paths.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using frugal::testing::TempDir;

namespace {

std::string make_data(const TempDir& dir) { return frugal::testing::make_shakespeare_data(dir, 6000); }

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The [base] table of an experiment with a one-layer model on `data`.
std::string one_layer_base(const std::string& data, int max_steps, int eval_interval) {
  return fmt::format(R"([base]
data.dir = "{}"
train = {{ batch_size = 4, max_steps = {}, eval_interval = {}, eval_batches = 1, threads = 1 }}
model = {{ n_layer = 1, n_head = 2, n_embd = 16, block_size = 16 }}
sample.count = 0
)", data, max_steps, eval_interval);
}

float first_loss(const std::string& run_dir) {
  return frugal::testing::logged_records(run_dir).at(0).at("loss").get<float>();
}

}  // namespace

TEST(Experiment, RunsEveryRunAndWritesTheReport) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string path = write_file(dir, "tiny.toml", R"(
description = "a tiny freezing experiment"
[base]
data.dir = ")" + data + R"("
train = { batch_size = 4, max_steps = 6, eval_interval = 3, eval_batches = 2, log_interval = 1, threads = 1 }
model = { n_layer = 2, n_head = 2, n_embd = 32, block_size = 32 }
optim.warmup_steps = 1
sample.count = 0
[pretrain]
steps = 20
[[run]]
name = "dense"
[[run]]
name = "frozen"
set = ["methods.freeze.frozen_layers=1"]
[[run]]
name = "scratch"
pretrained = false
baseline = "scratch"
)");
  const Experiment e = load_experiment(path);
  ASSERT_EQ(e.runs.size(), 3u);
  EXPECT_EQ(e.pretrain_steps, 20);
  EXPECT_TRUE(e.runs[1].pretrained);
  EXPECT_FALSE(e.runs[2].pretrained);
  const std::string out = dir.file("out");
  const ReportTable table = run_experiment(e, {.out_dir = out, .command = "frugal experiment tiny.toml",
                                               .plots = false, .quiet = true});
  ASSERT_EQ(table.rows.size(), 3u);
  for (const auto& row : table.rows) {
    EXPECT_EQ(row.steps, 6) << row.name;
    EXPECT_TRUE(row.final_val_loss.has_value()) << row.name;
  }
  EXPECT_EQ(table.rows[0].name, "dense");
  EXPECT_EQ(table.rows[1].baseline, 0u);  // against the first run
  EXPECT_EQ(table.rows[2].baseline, 2u);  // its own baseline: from scratch against itself
  for (const char* run : {"pretrain", "dense", "frozen", "scratch"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + run + "/metrics.jsonl")) << run;
  // Pretrained runs start from the same weights (same first loss), lower than from scratch.
  EXPECT_EQ(first_loss(out + "/dense"), first_loss(out + "/frozen"));
  EXPECT_LT(first_loss(out + "/dense"), first_loss(out + "/scratch"));
  const std::string results = read_file(out + "/results.md");
  EXPECT_NE(results.find("frugal experiment tiny.toml"), std::string::npos);
  EXPECT_NE(results.find("methods.freeze.frozen_layers=1"), std::string::npos);
  EXPECT_NE(results.find("| scratch |"), std::string::npos) << results;
  EXPECT_TRUE(std::filesystem::exists(out + "/report.md"));
}

// --set from the command line comes last, in the pretraining and every run: a quick check of a
// long experiment. A bad key is refused before anything trains.
TEST(Experiment, CommandLineOverridesApplyToThePretrainingAndEveryRun) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string path = write_file(dir, "tiny.toml", one_layer_base(data, 6, 3) + R"(
[pretrain]
steps = 20
[[run]]
name = "dense"
[[run]]
name = "longer"
set = ["train.max_steps=8"]
)");
  const Experiment e = load_experiment(path, {"train.max_steps=2"});
  for (const ExperimentRun* run : {static_cast<const ExperimentRun*>(nullptr), &e.runs[0], &e.runs[1]})
    EXPECT_EQ(experiment_config(e, run, dir.file("x")).get_int("train.max_steps"), 2);
  const std::string out = dir.file("out");
  const ReportTable table = run_experiment(e, {.out_dir = out, .plots = false, .quiet = true});
  for (const auto& row : table.rows) EXPECT_EQ(row.steps, 2) << row.name;
  EXPECT_THROW(load_experiment(path, {"optim.lrr=1"}), Error);
}

TEST(Experiment, RefusesMalformedFiles) {
  TempDir dir;
  auto expect_error = [&](const std::string& text, const std::string& fragment) {
    const std::string path = write_file(dir, "bad.toml", text);
    try {
      load_experiment(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(fragment), std::string::npos) << err.what();
    }
  };
  expect_error("[base]\ntrain.batch_size = 2\n", "no [[run]]");
  expect_error("[[run]]\nname = \"a\"\n[[run]]\nname = \"a\"\n", "used twice");
  expect_error("[[run]]\nname = \"a\"\nset = [\"optim.lr\"]\n", "key=value");
  expect_error("[[run]]\nname = \"a\"\nset = [\"optim.lrr=1\"]\n", "optim.lr");
  expect_error("runs = 3\n[[run]]\nname = \"a\"\n", "unknown key 'runs'");
  expect_error("[[run]]\nname = \"a\"\npretrained = true\n", "[pretrain]");
  expect_error("[base]\nmodel.n_layer = \"four\"\n[[run]]\nname = \"a\"\n", "model.n_layer");
  // values are checked as `frugal train` checks them, for every run, naming the run
  expect_error("[[run]]\nname = \"a\"\n[[run]]\nname = \"b\"\nset = [\"model.n_head=3\"]\n",
               "bad.toml run 'b': model.n_embd = 128 must be a positive multiple of model.n_head = 3");
  expect_error("[pretrain]\nsteps = 2\nset = [\"train.seq_len=999\"]\n[[run]]\nname = \"a\"\npretrained = false\n",
               "bad.toml [pretrain]: train.seq_len = 999 exceeds model.block_size");
  expect_error("[[run]]\nname = \"a\"\nbaselne = \"a\"\n", "unknown key 'baselne'");
  expect_error("[[run]]\nname = \"a\"\n[[run]]\nname = \"b\"\nbaseline = \"c\"\n", "baseline 'c' is not a run");
  expect_error("[[run]]\nname = \"a\"\n[[run]]\nname = \"b\"\nbaseline = 3\n", "baseline must be the name");
  expect_error("[[run]]\nname = \"a\"\n[[run]]\nname = \"b\"\nbaseline = \"a\"\n[[run]]\nname = \"c\"\n"
               "baseline = \"b\"\n", "run 'b' is a baseline and so is compared with itself");
  expect_error("[[run]]\nname = \"a\"\nbaseline = \"b\"\n[[run]]\nname = \"b\"\n", "(the first run)");
  // a run's directory is deleted and rewritten: its name must not reach outside the output
  for (const char* name : {"..", ".", ".hidden", "a/b", "a b", ""})
    expect_error(fmt::format("[[run]]\nname = \"{}\"\n", name), "run name");
}

// Every TOML file shipped in experiments/ loads: an experiment file (one with [[run]] tables) as
// `frugal experiment` loads it, a run config (driven by a script there) as `frugal train` checks
// it before data, so that none fails only when a user runs it.
TEST(Experiment, EveryShippedFileLoads) {
  int experiments = 0, configs = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(test_paths::source_dir()) + "/experiments")) {
    if (f.path().extension() != ".toml") continue;
    const std::string path = f.path().string();
    try {
      if (read_file(path).find("\n[[run]]") != std::string::npos) {
        load_experiment(path);
        ++experiments;
      } else {
        run_settings(io::Config::load(run_schema(), path));
        ++configs;
      }
    } catch (const Error& err) {
      ADD_FAILURE() << err.what();
    }
  }
  EXPECT_GE(experiments, 30);
  EXPECT_GE(configs, 1);
}

// --only: an experiment in two sittings. The first trains the baseline alone (the other run is
// named in results.md, not in the table); the second trains the other run and reads the
// baseline's finished results without retraining it. Another config (here a --set) does not count
// the old results, so the run alone is then refused, and so does a marker written before one of
// the config's keys existed; so are names that are not runs.
TEST(Experiment, OnlyTrainsTheNamedRunsAndReadsTheOthersFinishedResults) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string path = write_file(dir, "two.toml", one_layer_base(data, 4, 2) + R"(
[[run]]
name = "dense"
[[run]]
name = "wider"
set = ["model.n_embd=32"]
)");
  const std::string out = dir.file("out");
  const Experiment e = load_experiment(path);
  const ReportTable first = run_experiment(e, {.out_dir = out, .plots = false, .quiet = true, .only = {"dense"}});
  ASSERT_EQ(first.rows.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(out + "/wider"));
  EXPECT_NE(read_file(out + "/results.md").find("train them with `--only`): wider."), std::string::npos)
      << read_file(out + "/results.md");
  const std::string dense_metrics = read_file(out + "/dense/metrics.jsonl");

  const ReportTable second = run_experiment(e, {.out_dir = out, .plots = false, .quiet = true, .only = {"wider"}});
  ASSERT_EQ(second.rows.size(), 2u);
  EXPECT_EQ(second.rows[0].name, "dense");
  EXPECT_EQ(second.rows[1].name, "wider");
  EXPECT_EQ(second.rows[1].baseline, 0u);
  EXPECT_EQ(second.rows[0].final_val_loss, first.rows[0].final_val_loss);
  EXPECT_EQ(read_file(out + "/dense/metrics.jsonl"), dense_metrics);  // read, not trained again
  EXPECT_EQ(read_file(out + "/results.md").find("Not in the table"), std::string::npos);

  const auto error = [&](const Experiment& x, std::vector<std::string> only) {
    return frugal::testing::error_of([&] { run_experiment(x, {.out_dir = out, .plots = false, .quiet = true, .only = only}); });
  };
  const std::string stale = error(load_experiment(path, {"optim.lr=1e-3"}), {"wider"});
  EXPECT_NE(stale.find("run 'wider' is compared with 'dense', which has no finished results"), std::string::npos) << stale;
  // A marker from before train.budget_retime existed: the run it marks counts as unfinished.
  const std::string marker_name = std::string("out/dense/") + kFinishedRunFile, marker = dir.file(marker_name);
  const std::string marked = read_file(marker);
  const size_t line = marked.find("budget_retime = ");
  ASSERT_NE(line, std::string::npos) << marked;
  write_file(dir, marker_name, marked.substr(0, line) + marked.substr(marked.find('\n', line) + 1));
  const std::string older = error(e, {"wider"});
  EXPECT_NE(older.find("which has no finished results with this config in " + out +
                       " (it finished before train.budget_retime existed; train it again, or add it to " + marker),
            std::string::npos) << older;
  write_file(dir, marker_name, marked);
  EXPECT_EQ(run_experiment(e, {.out_dir = out, .plots = false, .quiet = true, .only = {"wider"}}).rows.size(), 2u);
  EXPECT_NE(error(e, {"densee"}).find("has no run 'densee'"), std::string::npos);
  EXPECT_NE(error(e, {"pretrain"}).find("(no [pretrain] table)"), std::string::npos);
  EXPECT_EQ(read_file(out + "/dense/metrics.jsonl"), dense_metrics);  // nothing trained by the refusals
}

// Seeds: each run names its own seed's dense run, which is then its own baseline; the rest keep the first.
TEST(Experiment, BaselinesPerSeed) {
  TempDir dir;
  const std::string path = write_file(dir, "seeds.toml", R"(
[[run]]
name = "dense"
[[run]]
name = "method"
[[run]]
name = "dense-s2"
set = ["train.seed=7"]
[[run]]
name = "method-s2"
baseline = "dense-s2"
set = ["train.seed=7"]
)");
  EXPECT_EQ(baseline_indices(load_experiment(path)), (std::vector<size_t>{0, 0, 2, 2}));
}

TEST(Experiment, CommandReportsAMissingFile) {
  const frugal::testing::CliResult r = frugal::testing::run_frugal("experiment /nonexistent/exp.toml");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("experiment file /nonexistent/exp.toml not found"), std::string::npos) << r.output;
}

TEST(Experiment, RefusesDirectoriesInUseAndTouchesNothing) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string path = write_file(dir, "tiny.toml", one_layer_base(data, 2, 2) + R"(
[[run]]
name = "dense"
)");
  const Experiment e = load_experiment(path);
  const std::string out = dir.file("out"), pid = std::to_string(::getpid());
  auto run = [&] {
    try {
      run_experiment(e, {.out_dir = out, .plots = false, .quiet = true});
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  {
    const io::DirLock experiment = io::DirLock::exclusive(out, "experiment directory", "wait");
    const std::string msg = run();
    EXPECT_NE(msg.find("experiment directory " + out + " is in use by frugal pid " + pid), std::string::npos) << msg;
  }
  // A run directory in use (say, by a `frugal train` pointed at it) is neither deleted nor written.
  {
    const io::DirLock run_dir = io::DirLock::exclusive(out + "/dense", "run directory", "wait");
    write_file(dir, "out/dense/metrics.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
    const std::string msg = run();
    EXPECT_NE(msg.find("run directory " + out + "/dense is in use by frugal pid " + pid), std::string::npos) << msg;
    EXPECT_EQ(read_file(out + "/dense/metrics.jsonl"), "{\"step\": 1, \"loss\": 2.0}\n");
  }
  EXPECT_EQ(run(), "no error");
}
