// The CPU backend's reference path (FRUGAL_ISA=ref): every family's kernel table filled with the
// naive templates of kernels/ref/ instantiated in float, and the few adapters where ops.h's
// signature differs from the template's (a parameter struct, an enum, a packed sparse weight,
// the streamed sum of squares). Slow by design: it shows what the optimised paths must compute.
#include <algorithm>
#include <vector>

#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/sparse24.h"
#include "frugal/kernels/cpu/sparse_linear.h"
#include "frugal/kernels/ref/activations_ref.h"
#include "frugal/kernels/ref/adamw_ref.h"
#include "frugal/kernels/ref/newton_schulz_ref.h"
#include "frugal/kernels/ref/qk_transform_ref.h"
#include "frugal/kernels/ref/attention_ref.h"
#include "frugal/kernels/ref/elementwise_ref.h"
#include "frugal/kernels/ref/encoder_ref.h"
#include "frugal/kernels/ref/layernorm_ref.h"
#include "frugal/kernels/ref/lm_head_ref.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/kernels/ref/matmul_ref.h"
#include "frugal/kernels/ref/moe_ref.h"
#include "frugal/kernels/ref/sparse24_ref.h"
#include "frugal/kernels/ref/sparse_linear_ref.h"

namespace frugal::kernels::cpu {
namespace {

// ---- bf16: the reference's rounding, element by element ----
void f32_to_bf16_ref(bf16* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = ref::to_bf16(in[i]);
}
void bf16_to_f32_ref(float* out, const bf16* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = ref::to_f32(in[i]);
}

// A bf16 output: the fp32 reference's, rounded element by element.
struct Rounded {
  explicit Rounded(size_t n) : values(n) {}
  void to(bf16* out) const { f32_to_bf16_ref(out, values.data(), values.size()); }
  std::vector<float> values;
};

// ---- layernorm: the bf16 output is the rounded fp32 one ----
void layernorm_forward_bf16(bf16* out16, float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C, float eps) {
  Rounded y(size_t(N) * C);
  ref::layernorm_forward(y.values.data(), mean, rstd, inp, weight, bias, N, C, eps);
  if (out) std::copy(y.values.begin(), y.values.end(), out);
  y.to(out16);
}

// ---- attention: the bf16 forward and backward where they compute on bf16 (else fp32), the
// forward's output rounded ----
void attention_forward_bf16(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C, int NH,
                            const AttentionPattern& pattern) {
  if (attention_bf16_operands(pattern, T))
    ref::attention_forward_bf16(out, lse, qkv, B, T, C, NH, pattern);
  else
    ref::attention_forward(out, lse, qkv, B, T, C, NH, pattern);
  f32_to_bf16_ref(out16, out, size_t(B) * T * C);
}
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH, const AttentionPattern& pattern) {
  (attention_bf16_operands(pattern, T) ? &ref::attention_backward_bf16<float> : &ref::attention_backward<float>)(
      dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
}

// ---- activations: GateAct -> the template's 0 (gelu) / 1 (silu); bf16 outputs rounded ----
int act_index(GateAct act) { return act == GateAct::Gelu ? 0 : 1; }

void gated_forward(float* out, const float* gate, const float* up, size_t n, GateAct act) {
  ref::gated_forward(out, gate, up, n, act_index(act));
}
void gelu_forward_bf16(bf16* out, const float* inp, size_t n) {
  Rounded y(n);
  ref::gelu_forward(y.values.data(), inp, n);
  y.to(out);
}
void relu2_forward_bf16(bf16* out, const float* inp, size_t n) {
  Rounded y(n);
  ref::relu2_forward(y.values.data(), inp, n);
  y.to(out);
}
void gated_forward_bf16(bf16* out, const float* gate, const float* up, size_t n, GateAct act) {
  Rounded y(n);
  ref::gated_forward(y.values.data(), gate, up, n, act_index(act));
  y.to(out);
}
void gated_backward(float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, size_t n, GateAct act) {
  ref::gated_backward(dgate, dup, dout, gate, up, n, act_index(act));
}

// ---- elementwise: the stream keeps the running double sum in `total` ----
void sum_squares_feed(SumSquaresStream& stream, const float* x, size_t n) {
  stream.total += ref::sum_squares(x, n);
}
double sum_squares_finish(const SumSquaresStream& stream) { return stream.total; }

// ---- lm_head: the templates with d loss / d logit kept; the logits are the dense linear's forward
// over the first V rows ----
void lm_head_cross_entropy(float* losses, float* dinp, float* dweight, const float* inp, const float* weight,
                           const int32_t* targets, int N, int C, int V, float dloss, float softcap,
                           const LmHeadBias& bias) {
  ref::lm_head_cross_entropy<float>(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, softcap, {},
                                    bias.bias, bias.dbias);
}
void lm_head_cross_entropy_split(float* losses, float* dinp, float* dweight, const float* inp,
                                 const float* weight, const int32_t* targets, int N, int C, int V, float dloss,
                                 const VocabSplit& split, float softcap) {
  ref::lm_head_cross_entropy_split<float>(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, split,
                                          softcap);
}
void lm_head_logits(float* logits, const float* inp, const float* weight, int N, int C, int V,
                    const float* bias) {
  ref::matmul_forward(logits, inp, weight, bias, N, C, V);
}

// ---- adamw ----
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                  bool decay) {
  ref::adamw_update(p, g, m, v, n, s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.t, decay, s.grad_scale);
}
void adamw_update_bf16(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                       bool decay, const Bf16Rounding& rounding) {
  ref::adamw_update(p, g, m, v, n, s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.t, decay, s.grad_scale);
  ref::round_to_bf16(p16, p, n, rounding);
}

// ---- the sparse families: the CPU packing (its checks and its layout, which the packed weight's
// other readers use), plus the dense W and mask the reference products read ----
template <class Weight>
void keep_dense(Weight& packed, const float* W, const uint8_t* mask) {
  const size_t n = static_cast<size_t>(packed.OC) * packed.IC;
  if (packed.ref_weight.size() != n) packed.ref_weight.resize(n);
  std::copy(W, W + n, packed.ref_weight.data());
  if (!mask) return;
  if (packed.ref_mask.size() != n) packed.ref_mask.resize(n);
  std::copy(mask, mask + n, packed.ref_mask.data());
}

void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable) {
  sparse24_avx2.pack(out, W, mask, OC, IC, transposable);
  keep_dense(out, W, mask);
}
void sparse24_refresh_values(Sparse24Weight& packed, const float* W) {
  sparse24_avx2.refresh_values(packed, W);
  keep_dense(packed, W, nullptr);
}
void sparse24_forward(float* out, const float* inp, const Sparse24Weight& w, const float* bias,
                      int N) {
  check_sparse24_packed(w, "sparse24_matmul_forward");
  ref::sparse24_matmul_forward(out, inp, w.ref_weight.data(), w.ref_mask.data(), bias, N, w.IC,
                               w.OC);
}
void sparse24_backward_input(float* dinp, const float* dout, const Sparse24Weight& w, int N,
                             bool accumulate) {
  check_sparse24_transposable(w, "sparse24_matmul_backward_input");
  ref::sparse24_matmul_backward_input(dinp, dout, w.ref_weight.data(), w.ref_mask.data(), N, w.IC,
                                      w.OC, accumulate);
}

void sparse_linear_pack(SparseLinearWeight& out, const float* W, const uint8_t* mask, int OC,
                        int IC) {
  sparse_linear_avx2.pack(out, W, mask, OC, IC);
  keep_dense(out, W, mask);
}
void sparse_linear_refresh_values(SparseLinearWeight& packed, const float* W) {
  sparse_linear_avx2.refresh_values(packed, W);
  keep_dense(packed, W, nullptr);
}
void sparse_linear_forward(float* out, const float* inp, const SparseLinearWeight& w,
                           const float* bias, int N) {
  check_sparse_linear_packed(w, "sparse_linear_forward");
  ref::sparse_linear_forward(out, inp, w.ref_weight.data(), w.ref_mask.data(), bias, N, w.IC, w.OC);
}
void sparse_linear_backward_input(float* dinp, const float* dout, const SparseLinearWeight& w,
                                  int N, bool accumulate) {
  check_sparse_linear_packed(w, "sparse_linear_backward_input");
  ref::sparse_linear_backward_input(dinp, dout, w.ref_weight.data(), w.ref_mask.data(), N, w.IC,
                                    w.OC, accumulate);
}
void sparse_linear_backward_weight(float* dweight, const float* dout, const float* inp,
                                   const SparseLinearWeight& w, int N) {
  check_sparse_linear_packed(w, "sparse_linear_backward_weight");
  ref::sparse_linear_backward_weight(dweight, dout, inp, w.ref_mask.data(), N, w.IC, w.OC);
}

}  // namespace

const EncoderKernels encoder_ref{&ref::encoder_forward<float>, &ref::encoder_backward<float>};
const LayernormKernels layernorm_ref{&ref::layernorm_forward<float>, &ref::layernorm_backward<float>,
                                     &layernorm_forward_bf16};
const MatmulKernels matmul_ref{&ref::matmul_forward<float>, &ref::matmul_backward<float>};
const Bf16Kernels bf16_ref{&f32_to_bf16_ref,           &ref::round_to_bf16,        &bf16_to_f32_ref,
                           &ref::f32_to_bf16_bias_grad, &ref::matmul_bf16_forward, &ref::matmul_bf16_backward,
                           [] { return std::string(); }};
const Sparse24Kernels sparse24_ref{&sparse24_pack, &sparse24_refresh_values, &sparse24_forward,
                                   &sparse24_backward_input, &mvue24_rows};
const SparseLinearKernels sparse_linear_ref{&sparse_linear_pack, &sparse_linear_refresh_values,
                                            &sparse_linear_forward, &sparse_linear_backward_input,
                                            &sparse_linear_backward_weight};
const AttentionKernels attention_ref{&ref::attention_forward<float>, &attention_forward_bf16,
                                     &ref::attention_backward<float>, &attention_backward_bf16,
                                     &ref::attention_decode<float>};
const ActivationsKernels activations_ref{&ref::gelu_forward<float>, &ref::gelu_backward<float>,
                                         &gated_forward, &gated_backward, &ref::relu2_forward<float>,
                                         &ref::relu2_backward<float>, &gelu_forward_bf16, &relu2_forward_bf16,
                                         &gated_forward_bf16};
const ElementwiseKernels elementwise_ref{&ref::residual_forward<float>,
                                         &ref::dropout_apply<float>, &sum_squares_feed,
                                         &sum_squares_finish, &ref::scale_inplace<float>};
const LmHeadKernels lm_head_ref{&lm_head_cross_entropy, &lm_head_cross_entropy_split, &lm_head_logits,
                                 &ref::lm_head_cross_entropy_bf16, &ref::lm_head_cross_entropy_split_bf16,
                                 &ref::lm_head_softcap<float>};
const AdamwKernels adamw_ref{&adamw_update, &adamw_update_bf16};
const NewtonSchulzKernels newton_schulz_ref{&ref::newton_schulz<float>, &ref::newton_schulz_bf16<float>};
const QkTransformKernels qk_transform_ref{&ref::qk_transform_forward<float>, &ref::qk_transform_backward<float>};
const MoeKernels moe_ref{&ref::moe_router_forward<float>, &ref::moe_router_backward<float>,
                         &ref::moe_permute<float>, &ref::moe_unpermute<float>,
                         &ref::moe_unpermute_backward<float>, &ref::moe_grouped_forward<float>,
                         &ref::moe_grouped_backward<float>, &ref::moe_grouped_forward_bf16,
                         &ref::moe_grouped_backward_bf16};

}  // namespace frugal::kernels::cpu
