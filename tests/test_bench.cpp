// `frugal bench`'s run config and what its timed steps run (train/bench.h).
#include <gtest/gtest.h>

#include "frugal/train/bench.h"

namespace frugal {
namespace {

TEST(Bench, MaxStepsIsTheBenchRunAfterEveryOverride) {
  BenchPreset b = bench_preset("S");
  EXPECT_EQ(b.config.get_int("train.max_steps"), b.warmup + b.steps);
  EXPECT_TRUE(b.notes.empty());
  b = bench_preset("S", {"train.max_steps=1000"}, 1, 4);
  EXPECT_EQ(b.warmup, 1);
  EXPECT_EQ(b.steps, 4);
  EXPECT_EQ(b.config.get_int("train.max_steps"), 5);
  ASSERT_EQ(b.notes.size(), 1u);
  EXPECT_NE(b.notes[0].find("train.max_steps = 1000"), std::string::npos) << b.notes[0];
}

TEST(Bench, Sparse24IsTimedWithoutItsDenseFineTuning) {
  BenchPreset b = bench_preset("S", {"methods.sparse24={}"});
  EXPECT_EQ(b.config.get_float("methods.sparse24.dense_finetune_fraction"), 0.0);
  ASSERT_EQ(b.notes.size(), 1u);
  EXPECT_NE(b.notes[0].find("dense_finetune_fraction"), std::string::npos) << b.notes[0];
  b = bench_preset("S", {"methods.sparse24.dense_finetune_fraction=0"});
  EXPECT_TRUE(b.notes.empty());
}

}  // namespace
}  // namespace frugal
