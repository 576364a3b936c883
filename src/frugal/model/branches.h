// The residual branches a TransformerBlock is made of, each a component with one definition of
// its tensors, activations, forward, backward and FLOPs:
//   Attention: q|k|v projection (column-parallel), attention under the block's AttentionPattern
//     over this rank's heads, output projection (row-parallel); in decoding, against a key/value
//     cache.
//   FeedForward: the MLP's interface, which a mixture of experts (model/moe.h) implements too
//     (its work depends on the data; it reports its auxiliary losses and expert load through the
//     block); DenseMlp, the GELU or gated (GEGLU, SwiGLU) MLP: fc (and gate) column-parallel,
//     c_proj row-parallel.
// A branch maps its input (N, C), the normalised residual stream, to its output (N, C) before
// dropout; a row-parallel projection's partial sums meet at TensorCollectives::sum_rows, and so do
// the column-parallel input gradients in the backward. Under sequence parallelism the input (and
// the output's gradient) holds every rank's rows, joined by the block, and the sums leave only this
// rank's rows, in the first N / T rows of the output (and of the input gradient).
// Laid out with activation dtype BF16 (train.precision = "bf16"), a branch keeps the input of each
// linear it computes in bf16 (the attention output also in fp32, which its backward reads; the
// MLP activation only in bf16), written so by the kernel producing it (kernels/ops.h), and the
// linears read it as it is (model/linear_format.h): no rounding pass, half the bytes.
#pragma once
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/memory.h"
#include "frugal/kernels/ops.h"  // AttentionPattern, QkTransform
#include "frugal/model/collectives.h"
#include "frugal/model/flop_count.h"
#include "frugal/model/linear_format.h"
#include "frugal/model/param_table.h"
#include "frugal/model/spec.h"

namespace frugal {

// Hands out aligned pieces of an arena in call order: take(n) returns room for n floats (null when
// only counting, as the memory estimate does).
using Take = std::function<float*(double floats)>;
// Room for n bf16 values from `take` (null when only counting).
inline kernels::bf16* take_bf16(const Take& take, double n) {
  return reinterpret_cast<kernels::bf16*>(take(std::ceil(n / 2)));
}
// Sizes `arena` for what lay_out takes (each piece 64-byte aligned), then runs lay_out again
// handing out its pieces in order.
void allocate_layout(Buffer<float>& arena, const std::function<void(const Take&)>& lay_out);

// The linears of a block, in execution order (Qkv, Proj: the attention's; the others the MLP's).
enum class BlockLinear { Qkv, Proj, Fc, Gate, FcProj };
inline constexpr int kBlockLinears = 5;

// One linear of a branch: where its weight and bias are (kAbsent: none) and the format it executes
// with (model/linear_format.h).
struct LinearSlot {
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  size_t weight = kAbsent, bias = kAbsent;
  int OC = 0, IC = 0;  // this rank's shape
  std::shared_ptr<LinearFormat> format;
  // The slot of `prefix`.weight / .bias in `table` (OC, IC on this rank).
  static LinearSlot find(const ParamTable& table, const std::string& prefix, int OC, int IC,
                         std::shared_ptr<LinearFormat> format);
  bool present() const { return weight != kAbsent; }
  // out (N, OC) = inp (N, IC) · Wᵀ (+ b when with_bias)
  void forward(const float* params, float* out, const LinearInput& inp, int N, bool with_bias = true) const;
  // dinp (N, IC) = (or += when accumulate) dout · W; dW, db += (into grads)
  void backward(const float* params, float* grads, float* dinp, const float* dout, const LinearInput& inp,
                int N, bool accumulate_dinp) const;
  // backward's two halves, for a caller that runs something between them: dinp alone, then dW, db.
  void backward_input(const float* params, float* dinp, const float* dout, const LinearInput& inp, int N,
                      bool accumulate_dinp) const;
  void backward_weight(const float* params, float* grads, const float* dout, const LinearInput& inp, int N) const;
  // Adds its dense and executed FLOPs over N rows to f (the forward when runs, the backward's
  // products when trains), scaled by the format's densities.
  void add_flops(double N, bool runs, bool trains, ComponentFlops& f) const;
};

// Key/value caches of incremental decoding ((block_size, attn_width) each) and the position of the
// first row: pos0 == 0 is a prefill (the rows attend among themselves and fill the cache);
// otherwise one row at pos0 attends to the cached pos0 rows and itself.
struct KvCache {
  float *keys, *values;
  int pos0;
};

class Attention {
 public:
  struct Acts {
    // (N, 3W) (q and k after the QK transform, when there is one), (N, W), (B, NH, T), and the
    // QK-norm's (N, 2, NH) inverse RMS (null without QK-norm); att16 (N, W): att in bf16, the
    // projection's input (activation dtype BF16; else null)
    float *qkv, *att, *lse, *inv_rms;
    kernels::bf16* att16;
  };
  struct Scratch {
    float *dqkv, *datt;
  };
  // `prefix`attn.c_attn and `prefix`attn.c_proj of block `layer`.
  static void declare(ModelSpec& spec, const std::string& prefix, int layer);
  void lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const;
  void lay_out_scratch(double N, const Take& take, Scratch& scratch) const;
  Acts rows(const Acts& all, size_t row0) const;

  Attention(const ModelConfig& config, const LocalSizes& sizes, const std::string& prefix,
            const ParamTable& table, const std::shared_ptr<LinearFormat>& dense);
  LinearSlot& linear(BlockLinear which) { return which == BlockLinear::Qkv ? qkv_ : proj_; }
  const LinearSlot& linear(BlockLinear which) const { return which == BlockLinear::Qkv ? qkv_ : proj_; }
  const kernels::AttentionPattern& pattern() const { return pattern_; }
  void set_pattern(const kernels::AttentionPattern& p) { pattern_ = p; }

  // out (B·T, C) = the branch of in (B·T, C); `lead`: the rank that adds the projection's bias.
  void forward(const float* params, const Acts& a, const LinearInput& in, float* out, int B, int T,
               bool lead, TensorCollectives& comm, const KvCache* cache) const;
  // din (B·T, C) = d loss / d in (overwritten) from dout, d loss / d out; weight gradients +=.
  void backward(const float* params, float* grads, const Acts& a, const LinearInput& in, const float* dout,
                float* din, const Scratch& s, int B, int T, TensorCollectives& comm) const;
  void add_flops(int B, int T, bool runs, bool trains, ComponentFlops& f) const;

 private:
  LocalSizes sizes_;
  kernels::QkTransform transform_;  // QK-norm and rotary positions (model.qk_norm, model.position)
  LinearSlot qkv_, proj_;
  // The model's pattern (causal; bidirectional in an encoder) and the one installed (a sparse
  // pattern of MST, or the model's).
  kernels::AttentionPattern full_, pattern_;
};

// The MLP interface (see the header comment).
class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // What a forward keeps for its backward, and what the backward works in: pointers into the
  // arena at places each implementation names itself (lay_out, lay_out_scratch).
  using Acts = std::array<float*, 20>;
  using Scratch = std::array<float*, 20>;
  // What one forward reports: its auxiliary losses, weighted by their coefficients (LossTerms),
  // and the rows each expert received (empty without experts).
  struct Report {
    std::vector<std::pair<std::string, float>> auxiliary;
    std::vector<int64_t> load;
  };
  // dtype: the activation dtype (BF16: the linears' inputs in bf16, see the header comment).
  virtual void lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const = 0;
  virtual void lay_out_scratch(double N, const Take& take, Scratch& s) const = 0;
  virtual Acts rows(const Acts& all, size_t row0) const = 0;
  // The slot of an MLP linear (Fc, Gate, FcProj; not present when the MLP lacks it).
  virtual LinearSlot& linear(BlockLinear which) = 0;
  virtual const LinearSlot& linear(BlockLinear which) const = 0;
  // Whether, laid out with activation dtype BF16, it may take its input in bf16 only (an MLP whose
  // first GEMMs are LinearSlots'); otherwise `in` holds it in fp32.
  virtual bool bf16_input() const { return false; }
  virtual Report forward(const float* params, const Acts& a, const LinearInput& in, float* out, int N,
                         bool lead, TensorCollectives& comm) const = 0;
  // din (N, C) = d loss / d in (overwritten); weight gradients +=. aux_scale: the gradient scale
  // of the auxiliary losses (the micro-batch's grad_scale).
  virtual void backward(const float* params, float* grads, const Acts& a, const LinearInput& in,
                        const float* dout, float* din, const Scratch& s, int N, float aux_scale,
                        TensorCollectives& comm) const = 0;
  virtual void add_flops(double N, bool runs, bool trains, ComponentFlops& f) const = 0;
  // The dtype of the GEMMs whose weights are no LinearSlot's (a mixture's experts): with BF16 they
  // run on bf16 working copies that refresh(params) rounds from the fp32 weights (the model calls
  // it whenever it refreshes its linears' formats) as `rounding` says. An MLP of LinearSlots has none.
  virtual void set_dtype(kernels::DType /*dtype*/, const WeightRounding& /*rounding*/) {}
  virtual void refresh(const float* /*params*/) {}
  virtual size_t working_copy_bytes() const { return 0; }
};

// The MLP's activation on n hidden values: act = gelu(fc), or act(gate) · fc when gated (GEGLU:
// GELU, SwiGLU: SiLU), in fp32 or in bf16 (act16; fp32 math); and its backward, dgate (gated only)
// and dfc overwritten.
void mlp_activation_forward(MlpKind kind, float* act, const float* gate, const float* fc, size_t n);
void mlp_activation_forward(MlpKind kind, kernels::bf16* act16, const float* gate, const float* fc, size_t n);
void mlp_activation_backward(MlpKind kind, float* dgate, float* dfc, const float* dact, const float* gate,
                             const float* fc, size_t n);

class DenseMlp final : public FeedForward {
 public:
  // `prefix`c_fc, c_gate (gated MLPs) and c_proj of block `layer` with `hidden` units (prefix:
  // "transformer.h.L.mlp.", or a mixture's shared expert's).
  static void declare(ModelSpec& spec, const std::string& prefix, int layer, int64_t hidden);
  DenseMlp(const ModelConfig& config, const LocalSizes& sizes, const std::string& prefix,
           const ParamTable& table, const std::shared_ptr<LinearFormat>& dense);
  void lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const override;
  void lay_out_scratch(double N, const Take& take, Scratch& s) const override;
  Acts rows(const Acts& all, size_t row0) const override;
  LinearSlot& linear(BlockLinear which) override;
  const LinearSlot& linear(BlockLinear which) const override;
  bool bf16_input() const override { return true; }
  Report forward(const float* params, const Acts& a, const LinearInput& in, float* out, int N, bool lead,
                 TensorCollectives& comm) const override;
  void backward(const float* params, float* grads, const Acts& a, const LinearInput& in, const float* dout,
                float* din, const Scratch& s, int N, float aux_scale, TensorCollectives& comm) const override;
  void add_flops(double N, bool runs, bool trains, ComponentFlops& f) const override;

 private:
  // (N, H) each, Gate only when gated; Act in fp32 or (activation dtype BF16) Act16 in bf16, the
  // other null (Act16 holds a kernels::bf16*). The scratch's: Fc, Gate, Act, their gradients.
  enum Place { Fc, Gate, Act, Act16 };
  // The activation's bf16 values (null in fp32).
  static kernels::bf16* act16(const Acts& a) { return reinterpret_cast<kernels::bf16*>(a[Act16]); }
  MlpKind kind_;
  int hidden_;  // this rank's hidden units
  LinearSlot fc_, gate_, proj_;
};

}  // namespace frugal
