// The transformer block, and the whole GPT, split over a tensor-parallel group: ranks (threads
// here) holding their placements' parts of the weights (ModelSpec), computing with their
// LocalSizes and meeting at the TensorCollectives calls, give the whole block's output and input
// gradient and their parts of its weight gradients; a GPT shard per rank (vocabulary-parallel
// embedding and cross-entropy, dropout, recomputation, gated MLPs, tied and untied heads) gives
// one process's loss and gradients, and so do they with sequence parallelism (each rank holding
// its rows of the residual stream). This is the seam tensor parallelism over MPI plugs into.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/model/block.h"
#include "frugal/model/formats/dense.h"
#include "frugal/model/gpt.h"

namespace frugal {
namespace {

// Collectives among threads: the sum is taken in rank order, so every rank gets the same bits.
// `sequence`: the models built on it split their rows between the linears.
class ThreadCollectives final : public TensorCollectives {
 public:
  struct Group {
    explicit Group(int size) : size(size), sync(size), inputs(size) {}
    int size;
    std::barrier<> sync;
    std::vector<const float*> inputs;
    std::vector<float> sum;
  };
  ThreadCollectives(Group& group, int rank, bool sequence = false)
      : group_(group), rank_(rank), sequence_(sequence) {}
  ShardCoord coord() const override { return {.rank = rank_, .size = group_.size, .sequence = sequence_}; }
  void all_reduce_sum(float* x, size_t n) override {
    reduce(x, n, [](float a, float b) { return a + b; });
    std::copy_n(group_.sum.data(), n, x);
    group_.sync.arrive_and_wait();
  }
  void all_reduce_max(float* x, size_t n) override {
    reduce(x, n, [](float a, float b) { return std::max(a, b); });
    std::copy_n(group_.sum.data(), n, x);
    group_.sync.arrive_and_wait();
  }
  void reduce_scatter_sum(float* x, size_t n, float* out) override {
    reduce(x, n, [](float a, float b) { return a + b; });
    const size_t part = n / group_.size;
    std::copy_n(group_.sum.data() + rank_ * part, part, out);
    group_.sync.arrive_and_wait();
  }
  void all_gather(const float* local, size_t n, float* out) override {
    group_.inputs[rank_] = local;
    group_.sync.arrive_and_wait();
    for (int r = 0; r < group_.size; ++r) std::copy_n(group_.inputs[r], n, out + r * n);
    group_.sync.arrive_and_wait();
  }

 private:
  // group_.sum = op over the ranks' x in rank order; the caller reads it, then meets the others
  template <class Op>
  void reduce(const float* x, size_t n, Op op) {
    group_.inputs[rank_] = x;
    group_.sync.arrive_and_wait();
    if (rank_ == 0) {
      group_.sum.assign(group_.inputs[0], group_.inputs[0] + n);
      for (int r = 1; r < group_.size; ++r)
        for (size_t i = 0; i < n; ++i) group_.sum[i] = op(group_.sum[i], group_.inputs[r][i]);
    }
    group_.sync.arrive_and_wait();
  }

  Group& group_;
  int rank_;
  bool sequence_;
};

constexpr int kB = 2, kT = 8;
const BlockRange kBlock0{0, 1, false, false};  // block 0 alone

// One rank's block 0 with its parameters, gradients, activations and scratch.
struct RankBlock {
  RankBlock(const ModelConfig& c, const ShardCoord& shard)
      : table(ParamTable::build(c, kBlock0, shard)),
        params(table.total()),
        grads(table.total(), 0.0f),
        block(c, shard, 0, table, std::make_shared<DenseFormat>()) {
    const double N = kB * kT;
    allocate_layout(arena, [&](const Take& take) {
      block.lay_out_internals(N, take, acts, kernels::DType::F32);
      acts.res_out = take(N * c.n_embd);
      dres = take(N * c.n_embd);
      block.lay_out_scratch(N, take, scratch, kernels::DType::F32);
    });
  }
  // Forward of x, then backward of dout: res_out and dres hold the output and the input gradient.
  void run(const std::vector<float>& x, const std::vector<float>& dout, TensorCollectives& comm,
           int C) {
    block.forward(params.data(), acts, x.data(), scratch, kB, kT, {}, comm);
    std::copy(dout.begin(), dout.end(), dres);
    block.backward(params.data(), grads.data(), acts, x.data(), dres, scratch, kB, kT, {}, true, 1.0f, comm);
    output.assign(acts.res_out, acts.res_out + size_t(kB) * kT * C);
    input_grad.assign(dres, dres + size_t(kB) * kT * C);
  }
  ParamTable table;
  std::vector<float> params, grads, output, input_grad;
  TransformerBlock block;
  Buffer<float> arena;
  BlockActs acts{};
  BlockScratch scratch{};
  float* dres = nullptr;
};

std::vector<float> noise(size_t n, uint64_t key, float scale, float mean = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = mean + scale * (2 * uniform_at(key, i) - 1);
  return v;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// max |a - b| relative to max |b|
float relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d / std::max(max_abs(b), 1e-30f);
}

ModelConfig config(MlpKind mlp) {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 4;
  c.n_embd = 32;
  c.mlp = mlp;
  return c;
}

TEST(BlockTensorParallel, LocalPartsGatherBackIntoTheWholeTensor) {
  const ModelConfig c = config(MlpKind::Swiglu);
  const ParamTable whole = ParamTable::build(c, kBlock0);
  for (const ParamInfo& e : whole.entries()) {
    const std::vector<float> global = noise(e.numel, e.offset + 1, 1.0f);
    std::vector<float> gathered(e.numel, 0.0f);
    size_t held = 0;
    for (int r = 0; r < 2; ++r) {
      const ShardCoord shard{r, 2};
      std::vector<int64_t> local = e.local_shape(shard);
      size_t n = 1;
      for (int64_t d : local) n *= size_t(d);
      std::vector<float> part(n);
      e.copy_local(global.data(), part.data(), shard);
      e.copy_global(part.data(), gathered.data(), shard);
      held += n;
    }
    EXPECT_EQ(global, gathered) << e.name;
    const bool sharded = e.placement.kind == Placement::Kind::Sharded;
    EXPECT_EQ(held, sharded ? e.numel : 2 * e.numel) << e.name;
  }
  // q|k|v is split per part: rank 0 holds the first heads of each of q, k and v
  const ParamInfo& qkv = whole.at("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ((std::vector<int64_t>{48, 32}), qkv.local_shape({0, 2}));
  EXPECT_EQ((std::vector<int64_t>{32, 64}), whole.at("transformer.h.0.mlp.c_proj.weight").local_shape({1, 2}));
}

TEST(BlockTensorParallel, TwoRanksComputeTheWholeBlocksOutputAndGradients) {
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Swiglu}) {
    const ModelConfig c = config(mlp);
    const int C = c.n_embd;
    RankBlock whole(c, {});
    for (const ParamInfo& e : whole.table.entries()) {  // weights ~ 0.1 noise, LayerNorm gains ~ 1
      const float mean = e.role == ParamRole::NormWeight ? 1.0f : 0.0f;
      const std::vector<float> v = noise(e.numel, 100 + e.offset, 0.1f, mean);
      std::copy(v.begin(), v.end(), whole.params.begin() + e.offset);
    }
    const std::vector<float> x = noise(size_t(kB) * kT * C, 7, 1.0f),
                             dout = noise(size_t(kB) * kT * C, 8, 1.0f);
    SoloCollectives solo;
    whole.run(x, dout, solo, C);

    ThreadCollectives::Group group(2);
    std::vector<std::unique_ptr<RankBlock>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::make_unique<RankBlock>(c, ShardCoord{r, 2}));
      for (const ParamInfo& e : ranks[r]->table.entries())
        e.copy_local(whole.params.data() + whole.table.at(e.name).offset, ranks[r]->params.data() + e.offset,
                     {r, 2});
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ThreadCollectives comm(group, r);
        ranks[r]->run(x, dout, comm, C);
      });
    for (auto& t : threads) t.join();

    const char* name = mlp_kind_name(mlp);
    for (int r = 0; r < 2; ++r) {
      EXPECT_LT(relative_error(ranks[r]->output, whole.output), 1e-5f) << name << " rank " << r;
      EXPECT_LT(relative_error(ranks[r]->input_grad, whole.input_grad), 1e-5f) << name << " rank " << r;
      for (const ParamInfo& e : ranks[r]->table.entries()) {
        std::vector<float> want(e.numel);
        e.copy_local(whole.grads.data() + whole.table.at(e.name).offset, want.data(), {r, 2});
        const std::vector<float> got(ranks[r]->grads.begin() + e.offset,
                                     ranks[r]->grads.begin() + e.offset + e.numel);
        EXPECT_LT(relative_error(got, want), 1e-5f) << name << " rank " << r << " " << e.name;
      }
    }
    EXPECT_EQ(ranks[0]->output, ranks[1]->output) << "the sums must give every rank the same bits";
  }
}

// Two GPT shards (threads) against the whole model: the same initial weights (the whole model's,
// scattered), one training micro-batch with dropout, the loss on every rank and the gathered
// gradients. The sums of partial products round differently from one process's GEMMs, hence a
// tolerance; the loss is the same bits on every rank.
void expect_gpt_shards_equal_the_whole(ModelConfig c, bool recompute, bool sequence = false) {
  c.vocab_size = 70;  // rank 0: 64 rows of real tokens, rank 1: 6 and padding
  c.n_layer = 2;
  c.dropout = 0.1f;
  c.block_size = kT;
  const std::vector<bool> policy(c.n_layer, recompute);
  std::vector<int32_t> tokens(kB * kT), targets(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    tokens[i] = (i * 37) % c.vocab_size;
    targets[i] = i % 7 == 3 ? -1 : (i * 11 + 5) % c.vocab_size;
  }
  constexpr uint64_t kDropoutKey = 1234;
  GPT whole(c);
  whole.init_weights(5);
  whole.plan(kB, kT, policy);
  whole.zero_grad();
  const float loss = whole.forward(tokens.data(), targets.data(), 0.5f, kDropoutKey);
  whole.backward();

  ThreadCollectives::Group group(2);
  std::vector<std::unique_ptr<ThreadCollectives>> comms;
  std::vector<std::unique_ptr<GPT>> ranks;
  for (int r = 0; r < 2; ++r) {
    comms.push_back(std::make_unique<ThreadCollectives>(group, r, sequence));
    ranks.push_back(std::make_unique<GPT>(c, BlockRange::whole(c), comms[r].get()));
    for (const ParamInfo& e : ranks[r]->table().entries())
      e.copy_local(whole.params() + whole.table().at(e.name).offset, ranks[r]->params() + e.offset, {r, 2});
    ranks[r]->plan(kB, kT, policy);
    ranks[r]->zero_grad();
  }
  std::vector<float> losses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      losses[r] = ranks[r]->forward(tokens.data(), targets.data(), 0.5f, kDropoutKey);
      ranks[r]->backward();
    });
  for (auto& t : threads) t.join();

  const std::string what = fmt::format("{} {} head{}{}", mlp_kind_name(c.mlp), c.tied_head ? "tied" : "untied",
                                       recompute ? ", recomputed" : "", sequence ? ", sequence-parallel" : "");
  EXPECT_EQ(losses[0], losses[1]) << what;
  EXPECT_NEAR(losses[0], loss, 1e-6f * loss) << what;
  for (const ParamInfo& e : whole.table().entries()) {
    const std::vector<float> want(whole.grads() + e.offset, whole.grads() + e.offset + e.numel);
    std::vector<float> got(e.numel, 0.0f);
    for (int r = 0; r < 2; ++r) {
      const ParamInfo& local = ranks[r]->table().at(e.name);
      std::vector<float> part(ranks[r]->grads() + local.offset, ranks[r]->grads() + local.offset + local.numel);
      if (e.placement.kind == Placement::Kind::Replicated && r == 1) {
        EXPECT_EQ(part, std::vector<float>(got.begin(), got.end())) << what << " " << e.name << ": replicas differ";
        continue;
      }
      e.copy_global(part.data(), got.data(), {r, 2});
    }
    EXPECT_LT(relative_error(got, want), 2e-5f) << what << " " << e.name;
  }
}

TEST(GptTensorParallel, TwoShardsGiveTheWholeModelsLossAndGradients) {
  ModelConfig c = config(MlpKind::Gelu);
  for (bool tied : {true, false}) {
    c.tied_head = tied;
    expect_gpt_shards_equal_the_whole(c, false);
  }
  c.mlp = MlpKind::Swiglu;
  expect_gpt_shards_equal_the_whole(c, true);
  c.norm = NormPlacement::Post;
  expect_gpt_shards_equal_the_whole(c, false);
  // rotary positions and QK-norm act per head (each rank on its own heads); the soft-cap bends the
  // split head's logits on each rank before the group's statistics
  c.norm = NormPlacement::Pre, c.position = PositionKind::Rotary, c.qk_norm = true, c.logit_softcap = 2.0f;
  expect_gpt_shards_equal_the_whole(c, false);
}

// A shard (and a pipeline stage's shard) initialises its part of the whole model's weights, bit for
// bit: a tensor-parallel run starts in parts (StepStrategy::enter_parts) and is still one process's.
TEST(GptTensorParallel, EachShardInitialisesItsPartOfTheWholeModelsWeights) {
  ModelConfig c = config(MlpKind::Swiglu);
  c.vocab_size = 70;  // rank 1's vocabulary rows end in padding, which stays zero
  c.n_layer = 2;
  GPT whole(c);
  whole.init_weights(11);
  ThreadCollectives::Group group(2);
  for (const BlockRange& range : {BlockRange::whole(c), BlockRange{1, 2, false, true}}) {
    for (int r = 0; r < 2; ++r) {
      ThreadCollectives comm(group, r);
      GPT shard(c, range, &comm);
      shard.init_weights(11);
      for (const ParamInfo& e : shard.table().entries()) {
        std::vector<float> want(e.numel);
        e.copy_local(whole.params() + whole.table().at(e.name).offset, want.data(), comm.coord());
        EXPECT_EQ(std::vector<float>(shard.params() + e.offset, shard.params() + e.offset + e.numel), want)
            << e.name << " of rank " << r << " of blocks [" << range.begin << ", " << range.end << ")";
      }
    }
  }
}

// The same with sequence parallelism: the rows between the linears split over the two ranks, the
// dropout masks keyed by the global rows, the LayerNorms' and position embedding's gradients summed
// over the group (replicas with the same bits).
TEST(GptTensorParallel, SequenceParallelShardsGiveTheWholeModelsLossAndGradients) {
  ModelConfig c = config(MlpKind::Gelu);
  for (bool tied : {true, false}) {
    c.tied_head = tied;
    expect_gpt_shards_equal_the_whole(c, false, true);
  }
  c.mlp = MlpKind::Swiglu;
  expect_gpt_shards_equal_the_whole(c, true, true);
  c.norm = NormPlacement::Post;
  expect_gpt_shards_equal_the_whole(c, false, true);
  c.norm = NormPlacement::Pre, c.position = PositionKind::Rotary, c.qk_norm = true, c.logit_softcap = 2.0f;
  expect_gpt_shards_equal_the_whole(c, false, true);
}

// The memory plan of a sequence-parallel shard: every per-row activation between the linears — per
// block the LayerNorm outputs with their mean and rstd, res_mid and res_out (4 C + 4 floats a row),
// the embeddings' output (C) and the head's ln_f output, its statistics and gradient (2 C + 2) —
// holds N / T rows instead of N; the scratch gains the joined rows (the blocks', the head's and
// its gradient's, N C each) and the LayerNorm gradients' parts (4 C), and d res holds N / T rows.
TEST(GptTensorParallel, SequenceParallelismSplitsTheActivationsBetweenTheLinears) {
  ModelConfig c = config(MlpKind::Gelu);
  c.n_layer = 2;
  c.vocab_size = 70;
  c.block_size = kT;
  const int B = 4;
  const BlockRange whole = BlockRange::whole(c);
  const auto plan = [&](bool sequence) {
    return GPT::estimate_memory(c, B, kT, {}, whole, whole, 1, ShardCoord{.rank = 0, .size = 2, .sequence = sequence});
  };
  const MemoryPlan tensor = plan(false), sequence = plan(true);
  const size_t N = size_t(B) * kT, n = N / 2, C = c.n_embd, L = c.n_layer;  // every piece a multiple of 64 bytes
  EXPECT_EQ(tensor.activations - sequence.activations, (N - n) * (L * (4 * C + 4) + C + 2 * C + 2) * sizeof(float));
  EXPECT_EQ(sequence.scratch - tensor.scratch, (3 * N * C + 4 * C - (N - n) * C) * sizeof(float));
  EXPECT_EQ(tensor.parameters, sequence.parameters);
}

}  // namespace
}  // namespace frugal
