// TransformerBlock: the one definition of a transformer layer: pre-LN as GPT-2 (h = x +
// attn(ln_1(x)), out = h + mlp(ln_2(h))) or post-LN as BERT (h = ln_1(x + attn(x)), out =
// ln_2(h + mlp(h))), with a GELU or gated MLP. It declares its tensors (ModelSpec), lays out the
// activations its forward keeps and the scratch its backward uses, and runs its forward — over a
// micro-batch in training and evaluation, over a window's rows or one new row against a key/value
// cache in decoding — its backward, and its FLOP count. GPT runs it over the micro-batch, the
// Decoder over the window, model/flops.cpp and the memory estimate ask it: a new block kind is a
// class like this one, and nothing else spells out its tensors.
//
// A block computes with this rank's LocalSizes: under tensor parallelism its attention holds a
// share of the heads (q, k, v column-parallel, the output projection row-parallel) and its MLP a
// share of the hidden units (fc and gate column-parallel, the output projection row-parallel).
// The partial sums meet at the TensorCollectives calls: after each row-parallel linear in the
// forward, after the column-parallel linears' input gradients in the backward. A row-parallel
// linear adds its replicated bias on rank 0 only, so the sum holds it once.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "frugal/core/memory.h"
#include "frugal/kernels/attention_pattern.h"
#include "frugal/model/collectives.h"
#include "frugal/model/flop_count.h"
#include "frugal/model/linear_format.h"
#include "frugal/model/param_table.h"
#include "frugal/model/spec.h"

namespace frugal {

// The linears of a block, in execution order.
enum class BlockLinear { Qkv, Proj, Fc, Gate, FcProj };
inline constexpr int kBlockLinears = 5;

// Hands out aligned pieces of an arena in call order: take(n) returns room for n floats (null when
// only counting, as the memory estimate does).
using Take = std::function<float*(double floats)>;
// Sizes `arena` for what lay_out takes (each piece 64-byte aligned), then runs lay_out again
// handing out its pieces in order.
void allocate_layout(Buffer<float>& arena, const std::function<void(const Take&)>& lay_out);

// A block's activations over N rows: the internals its backward reads and its output res_out.
// Pre-LN: ln1 = ln_1(x), res_mid = x + attention branch, ln2 = ln_2(res_mid), res_out = res_mid +
// MLP branch. Post-LN: res_mid = x + attention branch, ln1 = ln_1(res_mid), ln2 = ln1 + MLP
// branch, res_out = ln_2(ln2). Each LayerNorm keeps its mean and rstd.
struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *lse, *res_mid, *ln2, *ln2_mean, *ln2_rstd, *fc,
      *gate, *act, *res_out;
};

// What a block's backward works in, shared by every block (and micro-batch) of a model (dsum:
// post-LN only).
struct BlockScratch {
  float *dln, *dqkv, *datt, *dfc, *dgate, *dact, *branch, *dsum;
};

class TransformerBlock {
 public:
  static constexpr size_t kAbsent = ~size_t(0);

  // Declares block `layer`'s tensors: ln_1, attn.c_attn (q|k|v), attn.c_proj, ln_2, mlp.c_fc,
  // mlp.c_gate (gated MLPs), mlp.c_proj.
  static void declare(ModelSpec& spec, int layer);
  // Lays out the internals of N rows (every field but res_out), then the backward scratch.
  static void lay_out_internals(const ModelConfig& c, const LocalSizes& s, double N, const Take& take,
                                BlockActs& a);
  static void lay_out_scratch(const ModelConfig& c, const LocalSizes& s, double N, const Take& take,
                              BlockScratch& scratch);
  // BlockActs of rows [row0, row0 + n) within `all` (the same fields, offset).
  static BlockActs rows(const BlockActs& all, const ModelConfig& c, const LocalSizes& s, size_t row0);

  // Block `layer` of a rank at `shard` of its tensor group, with its tensors' offsets in `table`
  // (kAbsent when the table lacks the block), every linear executing through `dense`.
  TransformerBlock(const ModelConfig& config, const ShardCoord& shard, int layer,
                   const ParamTable& table, std::shared_ptr<LinearFormat> dense);

  int layer() const { return layer_; }
  // The parameter-buffer offset of a linear's weight (kAbsent: Gate without a gated MLP, or a
  // block the table does not hold).
  size_t weight_offset(BlockLinear which) const { return linears_[int(which)].weight; }
  // (OC, IC) of a linear on this rank.
  std::pair<int, int> linear_shape(BlockLinear which) const;
  // Installs a linear's format (non-null); true when it differs from the one installed.
  bool set_format(BlockLinear which, std::shared_ptr<LinearFormat> format);
  LinearFormat& format(BlockLinear which) const { return *linears_[int(which)].format; }
  // Whether the forward may run on several threads at once, on other rows (every format allows it).
  bool reentrant_forward() const;
  const kernels::AttentionPattern& attention_pattern() const { return pattern_; }
  void set_attention_pattern(const kernels::AttentionPattern& p) { pattern_ = p; }

  // The residual branches' dropout in a training forward: probability p (0: none), masks keyed by
  // the step's key, the block and the branch, indexed from element `first` of the micro-batch.
  struct Dropout {
    float p = 0;
    uint64_t step_key = 0;
    size_t first = 0;
  };
  // Decoding: the block's key and value caches ((block_size, attn_width) each) and the position
  // of the first row. pos0 == 0: a prefill, the rows attend among themselves and fill the cache;
  // otherwise one row at pos0 attends to the cached pos0 rows and itself.
  struct KvCache {
    float *keys, *values;
    int pos0;
  };
  // a.res_out (B·T, C) = the block applied to x (B·T, C), keeping a's internals; res_mid and res_out
  // may be x itself (the decoder's in-place residual). `branch` (B·T, C) is scratch.
  void forward(const float* params, const BlockActs& a, const float* x, float* branch, int B, int T,
               const Dropout& dropout, TensorCollectives& comm, const KvCache* cache = nullptr) const;
  // Back-propagates d loss / d res_out, held in dres (B·T, C), through the forward kept in `a`
  // (from input x): accumulates the weight gradients into grads and leaves d loss / d x in dres
  // (when need_dinp; otherwise dres is left undefined).
  void backward(const float* params, float* grads, const BlockActs& a, const float* x, float* dres,
                const BlockScratch& scratch, int B, int T, const Dropout& dropout, bool need_dinp,
                TensorCollectives& comm) const;
  // out (N, OC) = inp (N, IC) · Wᵀ + b through the linear's format.
  void linear_forward(const float* params, BlockLinear which, float* out, const float* inp, int N,
                      bool with_bias = true) const;

  // FLOPs of B sequences of T tokens: executed when `runs` (forward) and `trains` (backward), and
  // dense (every linear dense, causal attention).
  ComponentFlops flops(int B, int T, bool runs, bool trains) const;

 private:
  struct Linear {
    size_t weight = kAbsent, bias = kAbsent;
    std::shared_ptr<LinearFormat> format;
  };
  void linear_backward(const float* params, float* grads, BlockLinear which, float* dinp,
                       const float* dout, const float* inp, int N, bool accumulate_dinp) const;
  bool row_parallel(BlockLinear which) const {
    return which == BlockLinear::Proj || which == BlockLinear::FcProj;
  }

  ModelConfig config_;
  LocalSizes sizes_;
  int layer_;
  size_t ln1_w_, ln1_b_, ln2_w_, ln2_b_;
  std::array<Linear, kBlockLinears> linears_;
  kernels::AttentionPattern pattern_;
  bool lead_ = true;  // rank 0 of the tensor group: adds the row-parallel linears' biases
};

}  // namespace frugal
