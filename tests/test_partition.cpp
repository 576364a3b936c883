// AutoPipe's partitioning (parallel/partition.h): stage costs, the exact balance against brute
// force over every cut, the frozen prefix kept in the first stage, and how far a pipeline shortens
// as layers freeze (PipeTransformer's rule: while the slowest stage is no slower than at start).
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "frugal/core/error.h"
#include "frugal/parallel/partition.h"

namespace frugal::parallel {
namespace {

// L identical blocks: forward 1, backward 2; embeddings 0.5 / 0.5; head 1 / 0.25.
UnitCosts uniform(int L) {
  UnitCosts c;
  c.block_forward.assign(L, 1.0);
  c.block_backward.assign(L, 2.0);
  c.embeddings_forward = c.embeddings_backward = 0.5;
  c.head_forward = 1.0;
  c.head_backward = 0.25;
  return c;
}

// The slowest stage of the best cut by trying every cut.
double brute_force_best(const UnitCosts& c, int frozen, int K) {
  const int L = c.n_layer();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> bounds(K + 1);
  bounds[0] = 0;
  bounds[K] = L;
  std::function<void(int)> cut = [&](int k) {
    if (k == K) {
      if (bounds[1] <= std::min(frozen, L - 1)) return;
      best = std::min(best, slowest_stage(c, frozen, bounds));
      return;
    }
    for (int b = bounds[k - 1] + 1; b <= L - (K - k); ++b) {
      bounds[k] = b;
      cut(k + 1);
    }
  };
  cut(1);
  return best;
}

TEST(Partition, StageCostCountsFrozenBlocksForwardOnly) {
  const UnitCosts c = uniform(6);
  EXPECT_DOUBLE_EQ(stage_cost(c, 0, 0, 3), 0.5 + 0.5 + 3 * 3.0);
  EXPECT_DOUBLE_EQ(stage_cost(c, 2, 0, 3), 0.5 + 2 * 1.0 + 3.0);  // frozen embeddings: forward only
  EXPECT_DOUBLE_EQ(stage_cost(c, 2, 3, 6), 3 * 3.0 + 1.25);
  EXPECT_DOUBLE_EQ(slowest_stage(c, 0, {0, 3, 6}), 10.25);
}

TEST(Partition, BalanceIsTheBestCutAndKeepsTheFrozenPrefixInTheFirstStage) {
  UnitCosts c = uniform(7);
  for (int l = 0; l < 7; ++l) c.block_backward[l] = 1.0 + 0.4 * l;  // uneven blocks
  for (int frozen = 0; frozen <= 6; ++frozen)
    for (int K = 1; K <= 4; ++K) {
      if (!can_partition(7, frozen, K)) continue;
      const std::vector<int> bounds = balance_stages(c, frozen, K);
      ASSERT_EQ(bounds.size(), size_t(K + 1));
      EXPECT_EQ(bounds.front(), 0);
      EXPECT_EQ(bounds.back(), 7);
      for (int k = 0; k < K; ++k) EXPECT_LT(bounds[k], bounds[k + 1]);
      EXPECT_GT(bounds[1], std::min(frozen, 6)) << "the first stage trains a block";
      EXPECT_DOUBLE_EQ(slowest_stage(c, frozen, bounds), brute_force_best(c, frozen, K))
          << "frozen " << frozen << ", K " << K;
    }
}

TEST(Partition, CanPartitionNeedsATrainableBlockPerStage) {
  EXPECT_TRUE(can_partition(6, 4, 2));
  EXPECT_FALSE(can_partition(6, 5, 2));
  EXPECT_TRUE(can_partition(6, 5, 1));
  EXPECT_TRUE(can_partition(6, 6, 1));  // all frozen: one stage (ln_f and the head train)
  EXPECT_TRUE(can_partition(8, 0, 8));
  EXPECT_FALSE(can_partition(8, 1, 8));
  EXPECT_THROW(balance_stages(uniform(6), 5, 2), Error);
}

TEST(Partition, AutoPipeHalvesWhileTheSlowestStageIsNoSlowerThanAtStart) {
  // freeze-finetune's schedule (α = 1/3, L = 6): 2, 4, then 5 blocks frozen.
  const UnitCosts c = uniform(6);
  const double limit = slowest_stage(c, 0, balance_stages(c, 0, 2));  // 10.25: 3 blocks + head
  const PipelineLayout start = autopipe(c, 0, 2, 2, limit, true);
  EXPECT_EQ(start.stages, 2);
  EXPECT_EQ(start.replicas, 1);
  EXPECT_EQ(start.bounds, (std::vector<int>{0, 3, 6}));
  // 2 frozen: one stage would cost 2·1 + 4·3 + 1.25 + 0.5 = 15.75 > limit: re-balanced only.
  const PipelineLayout two = autopipe(c, 2, 2, 2, limit, true);
  EXPECT_EQ(two.stages, 2);
  EXPECT_LE(slowest_stage(c, 2, two.bounds), limit);
  EXPECT_EQ(two.bounds, (std::vector<int>{0, 4, 6}));  // 0.5 + 2 + 6 = 8.5 and 6 + 1.25
  // 4 frozen: 4 + 6 + 1.75 = 11.75 > limit; 5 frozen: 5 + 3 + 1.75 = 9.75 <= limit: AutoDP.
  EXPECT_EQ(autopipe(c, 4, 2, 2, limit, true).stages, 2);
  const PipelineLayout five = autopipe(c, 5, 2, 2, limit, true);
  EXPECT_EQ(five.stages, 1);
  EXPECT_EQ(five.replicas, 2);
  EXPECT_EQ(five.bounds, (std::vector<int>{0, 6}));
  // Not elastic: the pipeline keeps its length, re-balanced.
  EXPECT_EQ(autopipe(c, 4, 2, 2, limit, false).stages, 2);
  EXPECT_THROW(autopipe(c, 5, 2, 2, limit, false), Error);
}

TEST(Partition, AutoPipeOnFourRanksGoesFourToTwoToOne) {
  const UnitCosts c = uniform(8);
  const double limit = slowest_stage(c, 0, balance_stages(c, 0, 4));  // 2 blocks + embeddings or head
  EXPECT_EQ(autopipe(c, 0, 4, 4, limit, true).stages, 4);
  // Too few trainable blocks for 4 stages forces a halving whatever the cost.
  const PipelineLayout forced = autopipe(c, 6, 4, 4, limit, true);
  EXPECT_LE(forced.stages, 2);
  EXPECT_EQ(forced.stages * forced.replicas, 4);
  // All but one block frozen and no cost limit to speak of: one stage, four replicas.
  const PipelineLayout last = autopipe(c, 7, 4, 4, 1e9, true);
  EXPECT_EQ(last.stages, 1);
  EXPECT_EQ(last.replicas, 4);
}

}  // namespace
}  // namespace frugal::parallel
