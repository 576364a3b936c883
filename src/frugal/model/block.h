// TransformerBlock: the one definition of a transformer layer, composed of an attention branch and
// a feed-forward branch (model/branches.h) with LayerNorms and residual sums placed as
// ModelConfig::norm says: pre-LN as GPT-2 (h = x + attn(ln_1(x)), out = h + mlp(ln_2(h))) or
// post-LN as BERT (h = ln_1(x + attn(x)), out = ln_2(h + mlp(h))), dropout on each branch's output.
// It declares its tensors (ModelSpec), lays out the activations its forward keeps and the scratch
// its backward uses, and runs its forward — over a micro-batch in training and evaluation, over a
// window's rows or one new row against a key/value cache in decoding — its backward, and its FLOP
// count. GPT runs it over the micro-batch, the Decoder over the window, model/flops.cpp and the
// memory estimate ask it: nothing else spells out a block's tensors or its computation.
//
// A block computes with this rank's LocalSizes: under tensor parallelism each branch holds a share
// of the heads or hidden units, and the partial sums meet at the TensorCollectives calls the
// branches make. Rank 0 of the group adds the row-parallel projections' replicated biases.
// Under sequence parallelism (ShardCoord::sequence) the block's input, LayerNorms, dropout and
// residual sums hold only this rank's N / T rows: a LayerNorm output is all-gathered (into the
// scratch) before the branch's column-parallel linears and the branch's row-parallel sum is a
// reduce-scatter; the backward all-gathers the branch output's gradient, reduce-scatters the input
// gradient, and gathers the LayerNorm output again for the weight gradients. The LayerNorms'
// weight gradients of the rank's rows are summed over the group (in rank order) before they are
// added, so every rank holds the whole block's, as without. Dropout keys each element by its
// global index (Dropout::first): one process's masks.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "frugal/model/branches.h"
#include "frugal/model/moe.h"

namespace frugal {

// A block's activations over N rows: the internals its backward reads and its output res_out.
// Pre-LN: ln1 = ln_1(x), res_mid = x + attention branch, ln2 = ln_2(res_mid), res_out = res_mid +
// MLP branch. Post-LN: res_mid = x + attention branch, ln1 = ln_1(res_mid), ln2 = ln1 + MLP
// branch, res_out = ln_2(ln2). Each LayerNorm keeps its mean and rstd.
// Laid out with activation dtype BF16, a LayerNorm output that a branch's linears read is kept in
// bf16 too (ln1_16, ln2_16; else null), and only in bf16 when nothing else reads it (pre-LN: ln1
// always, ln2 when the MLP takes a bf16 input; the fp32 pointer is then null).
struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd;
  Attention::Acts attn;
  float *res_mid, *ln2, *ln2_mean, *ln2_rstd;
  FeedForward::Acts mlp;
  float* res_out;
  kernels::bf16 *ln1_16, *ln2_16;
};

// What a block's forward and backward work in, shared by every block (and micro-batch) of a model
// (dsum: post-LN only). branch and dln hold a branch's N rows (its output, its input gradient).
// Sequence parallelism's: a LayerNorm output's rows joined from every rank (N, C) in fp32 and/or
// bf16 as the block keeps it, and the ranks' partial LayerNorm weight gradients (4 C); else null.
struct BlockScratch {
  float* dln;
  Attention::Scratch attn;
  FeedForward::Scratch mlp;
  float *branch, *dsum;
  float* joined = nullptr;
  kernels::bf16* joined16 = nullptr;
  float* dnorms = nullptr;
};

class TransformerBlock {
 public:
  static constexpr size_t kAbsent = LinearSlot::kAbsent;

  // Declares block `layer`'s tensors: ln_1, the attention's, ln_2, the MLP's (a mixture of
  // experts' where ModelConfig::moe puts one).
  static void declare(ModelSpec& spec, int layer);

  // Block `layer` of a rank at `shard` of its tensor group, with its tensors' offsets in `table`
  // (kAbsent when the table lacks the block: a prototype that only lays out), every linear
  // executing through `dense`.
  TransformerBlock(const ModelConfig& config, const ShardCoord& shard, int layer,
                   const ParamTable& table, const std::shared_ptr<LinearFormat>& dense);

  // Lays out the internals of a micro-batch of N rows (every field but res_out; under sequence
  // parallelism the fields between the branches hold N / T rows) with the activation dtype (F32, or
  // BF16: the linears' inputs in bf16, see BlockActs), then the scratch.
  void lay_out_internals(double N, const Take& take, BlockActs& a, kernels::DType dtype) const;
  void lay_out_scratch(double N, const Take& take, BlockScratch& scratch, kernels::DType dtype) const;
  // BlockActs of rows [row0, row0 + n) within `all` (the same fields, offset).
  BlockActs rows(const BlockActs& all, size_t row0) const;

  int layer() const { return layer_; }
  // The parameter-buffer offset of a linear's weight (kAbsent: Gate without a gated MLP, or a
  // block the table does not hold).
  size_t weight_offset(BlockLinear which) const { return linear(which).weight; }
  // (OC, IC) of a linear on this rank.
  std::pair<int, int> linear_shape(BlockLinear which) const { return {linear(which).OC, linear(which).IC}; }
  // Installs a linear's format (non-null); true when it differs from the one installed.
  bool set_format(BlockLinear which, std::shared_ptr<LinearFormat> format);
  LinearFormat& format(BlockLinear which) const { return *linear(which).format; }
  // Whether the forward may run on several threads at once, on other rows (every format allows it).
  bool reentrant_forward() const;
  const kernels::AttentionPattern& attention_pattern() const { return attention_.pattern(); }
  // The block's mixture of experts; null when its MLP is dense.
  const MoeMlp* moe() const { return moe_; }
  void set_attention_pattern(const kernels::AttentionPattern& p) { attention_.set_pattern(p); }
  // The MLP's own working copies (FeedForward::set_dtype, refresh; a mixture's experts).
  void set_mlp_dtype(kernels::DType dtype, const WeightRounding& rounding) { mlp_->set_dtype(dtype, rounding); }
  void refresh_mlp(const float* params) const { mlp_->refresh(params); }
  size_t mlp_working_copy_bytes() const { return mlp_->working_copy_bytes(); }

  // The residual branches' dropout in a training forward: probability p (0: none), masks keyed by
  // the step's key, the block and the branch, indexed from element `first` of the micro-batch (the
  // rows' first element: under sequence parallelism, this rank's first row's).
  struct Dropout {
    float p = 0;
    uint64_t step_key = 0;
    size_t first = 0;
  };
  // a.res_out (B·T, C) = the block applied to x (B·T, C), keeping a's internals; res_mid and res_out
  // may be x itself (the decoder's in-place residual). It works in the scratch's branch (and, under
  // sequence parallelism, joined); x and res_out then hold this rank's rows. Returns the MLP's
  // report (auxiliary losses, expert load).
  FeedForward::Report forward(const float* params, const BlockActs& a, const float* x, const BlockScratch& scratch,
                              int B, int T, const Dropout& dropout, TensorCollectives& comm,
                              const KvCache* cache = nullptr) const;
  // Back-propagates d loss / d res_out, held in dres (B·T, C), through the forward kept in `a`
  // (from input x): accumulates the weight gradients into grads and leaves d loss / d x in dres
  // (when need_dinp; otherwise dres is left undefined). aux_scale: the auxiliary losses' gradient
  // scale (the forward's grad_scale).
  void backward(const float* params, float* grads, const BlockActs& a, const float* x, float* dres,
                const BlockScratch& scratch, int B, int T, const Dropout& dropout, bool need_dinp,
                float aux_scale, TensorCollectives& comm) const;

  // FLOPs of B sequences of T tokens: executed when `runs` (forward) and `trains` (backward), and
  // dense (every linear dense, causal attention).
  ComponentFlops flops(int B, int T, bool runs, bool trains) const;

 private:
  const LinearSlot& linear(BlockLinear which) const;
  LinearSlot& linear(BlockLinear which);

  // in (fp32 and/or bf16, this rank's rows) as a linear's input: itself, or under sequence
  // parallelism every rank's rows joined in the scratch
  LinearInput joined(const float* in, const kernels::bf16* in16, const BlockScratch& s, int N,
                     TensorCollectives& comm) const;

  ModelConfig config_;
  LocalSizes sizes_;
  ShardCoord shard_;
  int layer_;
  bool lead_;  // rank 0 of the tensor group: adds the row-parallel projections' biases
  size_t ln1_w_, ln1_b_, ln2_w_, ln2_b_;
  Attention attention_;
  std::unique_ptr<FeedForward> mlp_;
  const MoeMlp* moe_ = nullptr;  // mlp_ when it is a mixture of experts
};

}  // namespace frugal
