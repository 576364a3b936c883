// AutoPipe's partitioning (parallel/partition.h): stage costs, the exact balance against brute
// force over every cut, the frozen prefix kept in the first stage, and how far a pipeline shortens
// as layers freeze (PipeTransformer's rule: while the slowest stage is no slower than at start);
// which tensors a re-partition moves between the ranks; the costs in bytes held (parameter_costs).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "frugal/core/error.h"
#include "frugal/model/param_table.h"
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

// A two-block model with a tied head: wte and wpe, 4 tensors per block (no biases), ln_f.
ModelConfig two_blocks() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 1;
  m.n_embd = 16;
  m.vocab_size = 16;
  m.block_size = 8;
  m.bias = false;
  m.tied_head = true;
  return m;
}

TEST(Partition, TensorMovesBringEachRankWhatItDoesNotOwnFromTheLowestOwner) {
  const ModelConfig m = two_blocks();
  const BlockRange whole = BlockRange::whole(m), first{0, 1, true, false}, last{1, 2, false, true};
  // The whole model on both ranks to one stage each: everything is kept, nothing moves.
  EXPECT_TRUE(tensor_moves(m, {whole, whole}, {first, last}).empty());
  // Back to the whole model: each rank receives the other stage's tensors with their moments,
  // and the last stage its tied head's token embedding (which it held, not owned) from rank 0.
  const std::vector<TensorMove> gather = tensor_moves(m, {first, last}, {whole, whole});
  std::vector<std::string> to_rank0, to_rank1;
  for (const TensorMove& move : gather) {
    EXPECT_TRUE(move.moments) << move.name;
    EXPECT_EQ(move.from, 1 - move.to) << move.name;
    (move.to == 0 ? to_rank0 : to_rank1).push_back(move.name);
  }
  EXPECT_EQ(to_rank0, (std::vector<std::string>{"transformer.h.1.ln_1.weight", "transformer.h.1.attn.c_attn.weight",
                                                 "transformer.h.1.attn.c_proj.weight", "transformer.h.1.ln_2.weight",
                                                 "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight",
                                                 "transformer.ln_f.weight"}));
  EXPECT_EQ(to_rank1.front(), "transformer.wte.weight");
  EXPECT_EQ(to_rank1.size(), 2u + 6u);  // the embeddings and block 0
  // A new last stage of both blocks: block 0 comes with its moments, the tied head's token
  // embedding without (its owner stays the first stage).
  const std::vector<TensorMove> grow = tensor_moves(m, {first, last}, {first, BlockRange{0, 2, false, true}});
  ASSERT_EQ(grow.size(), 1u + 6u);
  EXPECT_EQ(grow[0], (TensorMove{"transformer.wte.weight", 0, 1, false}));
  EXPECT_EQ(grow[1], (TensorMove{"transformer.h.0.ln_1.weight", 0, 1, true}));
  // Among several owners (replicas), the lowest rank sends.
  const std::vector<TensorMove> replicas = tensor_moves(m, {first, last, first, last}, {whole, whole, whole, whole});
  for (const TensorMove& move : replicas) EXPECT_LE(move.from, 1) << move.name;
}

// GPT-2 124M's shape (preset L).
ModelConfig gpt2_small(bool tied_head) {
  ModelConfig m;
  m.vocab_size = 50257;
  m.block_size = 1024;
  m.n_layer = m.n_head = 12;
  m.n_embd = 768;
  m.tied_head = tied_head;
  return m;
}

// Bytes of `layer`'s parameters (-1 the embeddings, n_layer ln_f and an untied head).
double parameter_bytes(const ModelConfig& m, int layer) {
  double floats = 0;
  const ParamTable table = ParamTable::build(m);
  for (const ParamInfo& e : table.entries())
    if (e.layer == layer) floats += double(e.numel);
  return sizeof(float) * floats;
}

TEST(Partition, ParameterCostsAreTheBytesEachUnitHolds) {
  for (const bool tied : {true, false}) {
    const ModelConfig m = gpt2_small(tied);
    const UnitCosts c = parameter_costs(m);
    ASSERT_EQ(c.n_layer(), 12);
    const double embeddings = parameter_bytes(m, -1), block = parameter_bytes(m, 0), head = parameter_bytes(m, 12);
    const double wte = sizeof(float) * double(ParamTable::build(m).at("transformer.wte.weight").numel);
    // Parameters always; gradients and both moments while the unit trains.
    EXPECT_EQ(c.embeddings_forward, embeddings);
    EXPECT_EQ(c.embeddings_backward, 3 * embeddings);
    for (int l = 0; l < 12; ++l) {
      EXPECT_EQ(c.block_forward[l], block);
      EXPECT_EQ(c.block_backward[l], 3 * block);
    }
    // A tied head's copy of the token embedding: its weights and gradient, no moments.
    EXPECT_EQ(c.head_forward, head + (tied ? wte : 0));
    EXPECT_EQ(c.head_backward, 3 * head + (tied ? wte : 0));
    // A frozen prefix (with the embeddings) holds its parameters only.
    EXPECT_EQ(stage_cost(c, 2, 0, 3), embeddings + 2 * block + 4 * block);
  }
}

TEST(Partition, ParameterBalanceEvensTheStagesMemory) {
  const UnitCosts c = parameter_costs(gpt2_small(true));
  // The embeddings (39M parameters, with gradients and moments) weigh 5.6 blocks, the head's tied
  // copy of the token embedding (weights and gradient) 2.7: stage 0 gets 5 blocks, stage 1 7.
  const std::vector<int> bounds = balance_stages(c, 0, 2);
  EXPECT_EQ(bounds, (std::vector<int>{0, 5, 12}));
  EXPECT_EQ(slowest_stage(c, 0, bounds), brute_force_best(c, 0, 2));
}

}  // namespace
}  // namespace frugal::parallel
