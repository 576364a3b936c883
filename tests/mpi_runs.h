// Training runs under mpirun through the `frugal` binary, for the multi-process tests
// (test_data_parallel.cpp, test_pipeline.cpp): a fixture with bundled data that trains a run on
// N ranks or in one process (every rank and the one-process reference run 1 thread: oneDNN's
// results depend on the thread count; np = 4 oversubscribes the machine's 2 cores), reads its
// metrics, and compares two runs' losses, gradient norms and validation losses.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "paths.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

namespace frugal::testing {

#ifdef FRUGAL_HAVE_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif

inline std::string mpirun(int np) {
  return fmt::format("{} --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np {} {}",
                     test_paths::mpiexec(), np, test_paths::binary());
}

struct TrainedRun {
  std::string dir;
  std::vector<nlohmann::json> steps;  // metrics.jsonl
  std::string output;
};

class MpiRuns : public ::testing::Test {
 protected:
  // model: the --set arguments every run of the fixture shares.
  explicit MpiRuns(std::string model) : model_(std::move(model)) {}
  void SetUp() override {
    if (!kHaveMpi) GTEST_SKIP() << "built without MPI";
    data_ = make_shakespeare_data(tmp_, 200000);
  }

  std::string train_args(const std::string& name, int steps, const std::string& extra) const {
    return fmt::format("train {}/configs/shakespeare-char.toml {} --set data.dir={} --set train.out_dir={} "
                       "--set train.max_steps={} --overwrite {}", test_paths::source_dir(), model_, data_,
                       tmp_.file(name), steps, extra);
  }
  // `np` = 0: one process without mpirun.
  TrainedRun train(const std::string& name, int np, int steps, const std::string& extra) const {
    const std::string program = np == 0 ? std::string(test_paths::binary()) + " " : mpirun(np) + " ";
    const std::string threads = np == 0 ? " --set train.threads=1" : "";
    const CliResult r = run_shell(program + train_args(name, steps, extra) + threads);
    // A failed run ends the test here (gtest reports the exception), not later in an empty steps.back().
    if (r.rc != 0) throw std::runtime_error(fmt::format("run {} failed (exit {}):\n{}", name, r.rc, r.output));
    return {tmp_.file(name), frugal::testing::logged_records(tmp_.file(name)), r.output};
  }

  std::string model_;
  TempDir tmp_;
  std::string data_;
};

// The largest relative difference of `keys` (default loss, grad_norm and val_loss) over the steps
// both runs logged.
inline double max_relative_difference(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                                      const std::vector<std::string>& keys = {"loss", "grad_norm", "val_loss"}) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    for (const std::string& key : keys) {
      if (!a[i].contains(key)) continue;
      const double x = a[i][key], y = b[i][key];
      worst = std::max(worst, std::abs(x - y) / std::abs(x));
    }
  }
  return worst;
}

// loss, grad_norm, val_loss and lr equal to the bit at every step.
inline void expect_identical(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"loss", "grad_norm", "val_loss", "lr"}) {
      ASSERT_EQ(a[i].contains(key), b[i].contains(key));
      if (a[i].contains(key)) {
        EXPECT_EQ(a[i][key].get<double>(), b[i][key].get<double>()) << key << " at step " << i + 1;
      }
    }
}

}  // namespace frugal::testing
