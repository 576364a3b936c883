// The transformer block split over a tensor-parallel group: ranks (threads here) holding their
// placements' parts of the weights (ModelSpec), computing with their LocalSizes and meeting at the
// block's TensorCollectives calls, give the whole block's output and input gradient, and their
// parts of its weight gradients. This is the seam tensor parallelism over MPI plugs into.
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

namespace frugal {
namespace {

// Collectives among threads: the sum is taken in rank order, so every rank gets the same bits.
class ThreadCollectives final : public TensorCollectives {
 public:
  struct Group {
    explicit Group(int size) : size(size), sync(size), inputs(size) {}
    int size;
    std::barrier<> sync;
    std::vector<float*> inputs;
    std::vector<float> sum;
  };
  ThreadCollectives(Group& group, int rank) : group_(group), rank_(rank) {}
  ShardCoord coord() const override { return {rank_, group_.size}; }
  void all_reduce_sum(float* x, size_t n) override {
    group_.inputs[rank_] = x;
    group_.sync.arrive_and_wait();
    if (rank_ == 0) {
      group_.sum.assign(group_.inputs[0], group_.inputs[0] + n);
      for (int r = 1; r < group_.size; ++r)
        for (size_t i = 0; i < n; ++i) group_.sum[i] += group_.inputs[r][i];
    }
    group_.sync.arrive_and_wait();
    std::copy_n(group_.sum.data(), n, x);
    group_.sync.arrive_and_wait();
  }

 private:
  Group& group_;
  int rank_;
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
      block.lay_out_internals(N, take, acts);
      acts.res_out = take(N * c.n_embd);
      dres = take(N * c.n_embd);
      block.lay_out_scratch(N, take, scratch);
    });
  }
  // Forward of x, then backward of dout: res_out and dres hold the output and the input gradient.
  void run(const std::vector<float>& x, const std::vector<float>& dout, TensorCollectives& comm,
           int C) {
    block.forward(params.data(), acts, x.data(), scratch.branch, kB, kT, {}, comm);
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

}  // namespace
}  // namespace frugal
