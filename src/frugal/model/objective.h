// Objective: the component at the top of the model — what the last block's output is trained to
// predict. It declares its tensors, lays out what it keeps per micro-batch, computes the loss of a
// batch of targets (and, in a training forward, starts the backward: its weights' gradients and
// d loss / d its own normalised input), finishes the backward into the residual stream, and gives
// logits for evaluation and decoding. The loss comes back as LossTerms: the objective's own loss
// and any auxiliary losses (a mixture of experts' balancing losses), which a training step adds.
//
// CausalLmHead, the one objective today: the final LayerNorm and the LM head (tied to the token
// embedding or its own (Vp, C) weight), next-token cross-entropy over targets != -1, fused with
// the logits so that no (N, V) buffer exists. Under tensor parallelism the head is split over the
// vocabulary like the token embedding: each rank forms its columns' logits only, the rows' maxima
// and sums meet in the group (kernels::lm_head_cross_entropy_split), and the input gradient's
// parts are summed. Under sequence parallelism ln_f runs on this rank's rows, its output's rows are
// all-gathered for the head (every rank computes every row's loss), the input gradient's sum is a
// reduce-scatter, and ln_f's weight gradients are summed over the group.
//
// MaskedLmHead, the masked-LM objective of an encoder (BERT's and RoBERTa's head): on the rows
// with a target only (the masked positions, ~15%: gathered first, so the head costs that fraction
// of the rows), dense (C -> C) + GELU + LayerNorm, then the decoder tied to the token embedding
// with its own output bias, and cross-entropy against the original tokens. A pre-LN encoder has
// the final LayerNorm ln_f before it; a post-LN one (BERT) does not. Not split over a
// tensor-parallel group (refused at start-up).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/model/block.h"
#include "frugal/model/collectives.h"
#include "frugal/model/flop_count.h"
#include "frugal/model/param_table.h"
#include "frugal/model/spec.h"

namespace frugal {

// The losses of one forward: `loss`, the objective's mean over its targets, and named auxiliary
// losses (already weighted by their coefficients) that training adds to it.
struct LossTerms {
  float loss = 0;
  std::vector<std::pair<std::string, float>> auxiliary;
  float total() const {
    float t = loss;
    for (const auto& [name, value] : auxiliary) t += value;
    return t;
  }
};

// What an objective keeps for one micro-batch, in places it names itself (laid out by lay_out);
// under sequence parallelism the model sets the last two to its shared room for the micro-batch's
// whole rows (N, C) and their gradients (null otherwise).
using ObjectiveActs = std::array<float*, 18>;
inline constexpr int kJoinedRows = 16, kJoinedGrads = 17;

class Objective {
 public:
  virtual ~Objective() = default;
  virtual const char* name() const = 0;
  // Lays out what a forward of N rows keeps for its backward (under sequence parallelism, of this
  // rank's rows where it keeps rows).
  virtual void lay_out(double N, const Take& take, ObjectiveActs& acts) const = 0;
  // The loss of x (N, C; under sequence parallelism this rank's rows), the last block's output,
  // against targets (N; -1: ignored). When grads is
  // not null (a training forward) it also accumulates the objective's weight gradients and keeps
  // d loss / d its internals in acts, scaled by grad_scale and divided by the number of targets.
  // `comm`: the tensor-parallel group its split tensors meet in.
  virtual LossTerms forward(const float* params, float* grads, const ObjectiveActs& acts,
                            const float* x, const int32_t* targets, int N, float grad_scale,
                            TensorCollectives& comm) const = 0;
  // After a training forward: accumulates the objective's remaining gradients (its norms') when
  // `weights` and, when dres is not null, writes d loss / d x (N, C; as x) into it.
  virtual void backward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                        float* dres, int N, bool weights, TensorCollectives& comm) const = 0;
  // out (N, V) = the logits of the rows of the last forward (of a model that is not split), whose
  // input was x (N, C).
  virtual void logits(const float* params, const ObjectiveActs& acts, const float* x, float* out, int N) const = 0;
  // The offset of the decoder's weight (Vp, C): lm_head.weight, or the token embedding when tied.
  virtual size_t head_offset() const = 0;
  // out (V) = the logits of one row x (C), using scratch (C + 2 floats).
  virtual void row_logits(const float* params, const float* x, float* out, float* scratch) const = 0;
  // FLOPs of N rows: dense, and executed (`head_trains`: its weight-gradient product runs).
  virtual ComponentFlops flops(double N, bool head_trains) const = 0;
  // The dtype its GEMMs take (kernels/dtype.h): with BF16 they run on a bf16 working copy of its
  // weight, which refresh(params) rounds from the fp32 weights as `rounding` says (the model calls
  // it whenever its weights may have changed, as it refreshes the linears' formats).
  virtual void set_dtype(kernels::DType dtype, const WeightRounding& rounding) = 0;
  virtual void refresh(const float* params) = 0;
  virtual size_t working_copy_bytes() const = 0;  // what refresh() keeps
  // That copy as the part of the flat buffer it rounds (no data: none), for an optimizer to update.
  virtual WorkingCopy working_copy() = 0;
};

// The objective model.objective names: its tensors, and the component over a table of them.
void declare_objective(ModelSpec& spec);
// The LayerNorm (its name without ".weight") whose output a tied head's decoder reads: the
// decoder's transformer.ln_f, an encoder's lm_head.layer_norm (after the head's dense layer).
std::string head_input_norm(const ModelConfig& config);
std::unique_ptr<Objective> make_objective(const ModelConfig& config, const ParamTable& table);

// The decoder weight's bf16 working copy (rows, C) of a head whose dtype is BF16 (objectives'
// set_dtype / refresh / working_copy_bytes).
class HeadWorkingCopy {
 public:
  // The copy of the weight at `offset` of the flat buffer (kAbsent: none) in `dtype`.
  void set_dtype(kernels::DType dtype, size_t offset, const WeightRounding& rounding);
  bool bf16() const { return dtype_ == kernels::DType::BF16; }
  // Rounds weight (rows, C) when the dtype is BF16.
  void refresh(const float* weight, int rows, int C);
  const kernels::bf16* data() const { return copy_.data(); }
  size_t bytes() const { return copy_.size() * sizeof(kernels::bf16); }
  // The copy of the weight at `offset` of the flat buffer (no data: none).
  WorkingCopy at(size_t offset) {
    return copy_.empty() ? WorkingCopy{} : WorkingCopy{offset, copy_.size(), copy_.data(), rounding_};
  }

 private:
  kernels::DType dtype_ = kernels::DType::F32;
  kernels::Bf16Rounding rounding_;
  std::vector<kernels::bf16> copy_;
};

class CausalLmHead final : public Objective {
 public:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  // transformer.ln_f and, with an untied head, lm_head.weight (padded_vocab(), C).
  static void declare(ModelSpec& spec);
  CausalLmHead(const ModelConfig& config, const ParamTable& table);

  const char* name() const override { return "causal_lm"; }
  size_t head_offset() const override { return head_; }
  size_t norm_weight_offset() const { return norm_w_; }
  size_t norm_bias_offset() const { return norm_b_; }
  void lay_out(double N, const Take& take, ObjectiveActs& acts) const override;
  LossTerms forward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                    const int32_t* targets, int N, float grad_scale, TensorCollectives& comm) const override;
  void backward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                float* dres, int N, bool weights, TensorCollectives& comm) const override;
  void logits(const float* params, const ObjectiveActs& acts, const float* x, float* out, int N) const override;
  void row_logits(const float* params, const float* x, float* out, float* scratch) const override;
  ComponentFlops flops(double N, bool head_trains) const override;
  void set_dtype(kernels::DType dtype, const WeightRounding& rounding) override {
    copy_.set_dtype(dtype, head_, rounding);
  }
  void refresh(const float* params) override;
  size_t working_copy_bytes() const override { return copy_.bytes(); }
  WorkingCopy working_copy() override { return head_ == kAbsent ? WorkingCopy{} : copy_.at(head_); }

 private:
  // logits (N, V) of the normalised rows x (N, C), in the head's dtype
  void head_logits(const float* params, const float* x, float* out, int N) const;

  // ObjectiveActs places: ln_f's output, mean and rstd, the per-row losses, and d loss / d ln_f's output
  enum Place { Norm, Mean, Rstd, Losses, DNorm };
  ModelConfig config_;
  size_t norm_w_, norm_b_, head_;
  // The head's vocabulary columns [first_, first_ + columns_) that hold real tokens on this rank;
  // split_: not the whole vocabulary. shard_: this rank's place (sequence parallelism: its rows).
  bool split_;
  ShardCoord shard_;
  int first_, columns_;
  HeadWorkingCopy copy_;  // (columns_, C)
};

class MaskedLmHead final : public Objective {
 public:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  // transformer.ln_f (pre-LN only), lm_head.dense (C, C), lm_head.layer_norm, lm_head.bias
  // (padded_vocab(); with model.bias).
  static void declare(ModelSpec& spec);
  MaskedLmHead(const ModelConfig& config, const ParamTable& table);

  const char* name() const override { return "masked_lm"; }
  size_t head_offset() const override { return head_; }
  void lay_out(double N, const Take& take, ObjectiveActs& acts) const override;
  LossTerms forward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                    const int32_t* targets, int N, float grad_scale, TensorCollectives& comm) const override;
  void backward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                float* dres, int N, bool weights, TensorCollectives& comm) const override;
  void logits(const float* params, const ObjectiveActs& acts, const float* x, float* out, int N) const override;
  void row_logits(const float* params, const float* x, float* out, float* scratch) const override;
  ComponentFlops flops(double N, bool head_trains) const override;
  void set_dtype(kernels::DType dtype, const WeightRounding& rounding) override {
    copy_.set_dtype(dtype, head_, rounding);
  }
  void refresh(const float* params) override;
  size_t working_copy_bytes() const override { return copy_.bytes(); }
  WorkingCopy working_copy() override { return head_ == kAbsent ? WorkingCopy{} : copy_.at(head_); }

 private:
  // The transform of M rows g (M, C): h = g · denseᵀ + b, a = gelu(h), u = LayerNorm(a) (mean,
  // rstd (M)).
  void transform(const float* params, const float* g, int M, float* h, float* a, float* u, float* mean,
                 float* rstd) const;
  // out (M, V) = the decoder's logits of the transformed rows u (M, C), in the head's dtype.
  void decode(const float* params, const float* u, float* out, int M) const;
  // xn (N, C): ln_f(x) for a pre-LN encoder (mean, rstd (N)), else x itself (nothing written).
  const float* normed(const float* params, const float* x, int N, float* xn, float* mean, float* rstd) const;

  // ObjectiveActs places: ln_f's output, mean and rstd; the selected rows' indices (as floats)
  // and their count; the gathered rows, the dense output, the GELU output, the LayerNorm output
  // with its mean and rstd; the per-row losses; d loss / d the LayerNorm output, d loss / d the
  // GELU output (then d loss / d the gathered rows); the output bias' gradient of the forward.
  enum Place { Norm, Mean, Rstd, Rows, Count, Gathered, Dense, Gelu, Out, OutMean, OutRstd, Losses, DOut, DGelu,
               DBias };
  ModelConfig config_;
  size_t ln_f_w_, ln_f_b_, dense_w_, dense_b_, norm_w_, norm_b_, bias_, head_;
  HeadWorkingCopy copy_;  // (V, C)
};

}  // namespace frugal
