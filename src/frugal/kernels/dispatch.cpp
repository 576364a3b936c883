// The kernel dispatch (dispatch.h): the functions of kernels/ops.h, each calling through its
// family's table, and the choice of those tables.
#include "frugal/kernels/dispatch.h"

#include <atomic>

#include "frugal/core/error.h"

// A CUDA build (CMake defines FRUGAL_HAVE_CUDA when kernels/cuda/*.cu exist) must give its
// KernelTables to tables_for() below: docs/architecture.md, Kernels, "Adding a kernel backend".
#ifdef FRUGAL_HAVE_CUDA
#error "kernels/cuda/ has sources but no KernelTables registered in kernels/dispatch.cpp"
#endif

namespace frugal::kernels {
namespace {

// The tables of the process's backend for `isa` (resolved) in fp32: the one place a second
// backend plugs in.
const KernelTables& tables_for(Isa isa) { return cpu_kernel_tables(isa, DType::F32); }

// One kernel family: `member` names its table in KernelTables. The tables in use are resolved at
// the family's first call from selected_isa() (FRUGAL_ISA) and can be re-pointed by set().
template <auto member>
class Family {
 public:
  static const auto& table() {
    const KernelTables* tables = active_.load(std::memory_order_relaxed);
    if (!tables) [[unlikely]]
      tables = first_use();
    return *(tables->*member);
  }
  static Isa isa() {
    table();
    return active_.load(std::memory_order_relaxed)->isa;
  }
  static Isa set(Isa isa, const char* family) {
    check_isa_available(isa, family);
    const KernelTables& tables = tables_for(resolve_isa(isa));
    active_.store(&tables, std::memory_order_relaxed);
    return tables.isa;
  }

 private:
  static const KernelTables* first_use() {
    const KernelTables* expected = nullptr;
    active_.compare_exchange_strong(expected, &tables_for(selected_isa()));
    return active_.load(std::memory_order_relaxed);
  }
  static inline std::atomic<const KernelTables*> active_{nullptr};
};

using Encoder = Family<&KernelTables::encoder>;
using Layernorm = Family<&KernelTables::layernorm>;
using Matmul = Family<&KernelTables::matmul>;
using Bf16 = Family<&KernelTables::bf16>;
using Sparse24 = Family<&KernelTables::sparse24>;
using SparseLinear = Family<&KernelTables::sparse_linear>;
using Attention = Family<&KernelTables::attention>;
using Activations = Family<&KernelTables::activations>;
using Elementwise = Family<&KernelTables::elementwise>;
using LmHead = Family<&KernelTables::lm_head>;
using Adamw = Family<&KernelTables::adamw>;
using Moe = Family<&KernelTables::moe>;
using NewtonSchulz = Family<&KernelTables::newton_schulz>;
using QkTransformFamily = Family<&KernelTables::qk_transform>;

}  // namespace

const char* device_name(Device) { return "cpu"; }
Isa set_kernel_isa(Isa isa) {
  check_isa_available(isa, "kernels");
  Encoder::set(isa, "encoder");
  Layernorm::set(isa, "layernorm");
  Matmul::set(isa, "matmul");
  Bf16::set(isa, "bf16");
  Sparse24::set(isa, "2:4 kernel");
  SparseLinear::set(isa, "sparse linear kernel");
  Attention::set(isa, "attention kernels");
  Activations::set(isa, "activations");
  Elementwise::set(isa, "elementwise");
  LmHead::set(isa, "lm_head");
  Moe::set(isa, "moe");
  NewtonSchulz::set(isa, "newton_schulz");
  QkTransformFamily::set(isa, "qk_transform");
  return Adamw::set(isa, "adamw");
}

const KernelTables& active_kernel_tables() { return tables_for(Matmul::isa()); }

std::string kernel_backend_name() {
  const KernelTables& tables = active_kernel_tables();
  return std::string(device_name(tables.device)) + "/" + isa_name(tables.isa) + "/" +
         dtype_name(tables.dtype);
}

Isa attention_set_isa(Isa isa) { return Attention::set(isa, "attention kernels"); }
Isa attention_active_isa() { return Attention::isa(); }
Isa sparse24_set_isa(Isa isa) { return Sparse24::set(isa, "2:4 kernel"); }
Isa sparse24_active_isa() { return Sparse24::isa(); }
Isa sparse_linear_set_isa(Isa isa) { return SparseLinear::set(isa, "sparse linear kernel"); }
Isa sparse_linear_active_isa() { return SparseLinear::isa(); }
Isa moe_set_isa(Isa isa) { return Moe::set(isa, "moe"); }
Isa moe_active_isa() { return Moe::isa(); }

// ---- the functions of kernels/ops.h, family by family ----

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C) {
  Encoder::table().forward(out, tokens, wte, wpe, B, T, C);
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C) {
  Encoder::table().backward(dwte, dwpe, dout, tokens, B, T, C);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  Layernorm::table().forward(out, mean, rstd, inp, weight, bias, N, C, eps);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  Layernorm::table().backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_forward_bf16(bf16* out16, float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C, float eps) {
  Layernorm::table().forward_bf16(out16, out, mean, rstd, inp, weight, bias, N, C, eps);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  Matmul::table().forward(out, inp, weight, bias, N, C, OC);
}
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate_dinp) {
  Matmul::table().backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate_dinp);
}

void f32_to_bf16(bf16* out, const float* in, size_t n) { Bf16::table().to_bf16(out, in, n); }
void round_to_bf16(bf16* out, const float* in, size_t n, const Bf16Rounding& rounding) {
  Bf16::table().round_to_bf16(out, in, n, rounding);
}
void bf16_to_f32(float* out, const bf16* in, size_t n) { Bf16::table().to_f32(out, in, n); }
void f32_to_bf16_bias_grad(bf16* out, float* dbias, const float* dout, int N, int OC) {
  Bf16::table().to_bf16_bias_grad(out, dbias, dout, N, OC);
}
void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                         int C, int OC) {
  Bf16::table().matmul_forward(out, inp, weight, bias, N, C, OC);
}
void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp,
                          const bf16* weight, int N, int C, int OC, bool accumulate_dinp) {
  Bf16::table().matmul_backward(dinp, dweight, dout, inp, weight, N, C, OC, accumulate_dinp);
}
bool bf16_matmul_native() {
  const std::string isa = Bf16::table().matmul_isa();
  return isa.find("bf16") != std::string::npos || isa.find("amx") != std::string::npos;
}
std::string bf16_matmul_path() {
  const std::string isa = Bf16::table().matmul_isa();
  if (isa.empty()) return "converted to fp32";
  return std::string(bf16_matmul_native() ? "native" : "emulated") + " (oneDNN, " + isa + ")";
}

void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable) {
  Sparse24::table().pack(out, W, mask, OC, IC, transposable);
}
void sparse24_refresh_values(Sparse24Weight& packed, const float* W) {
  Sparse24::table().refresh_values(packed, W);
}
void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N) {
  Sparse24::table().forward(out, inp, weight, bias, N);
}
void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate) {
  Sparse24::table().backward_input(dinp, dout, weight, N, accumulate);
}
void mvue24_rows(float* dout_sparse, const float* dout, int N, int OC, uint64_t key, const int32_t* column,
                 int whole_OC) {
  Sparse24::table().mvue_rows(dout_sparse, dout, N, OC, key, column, whole_OC);
}

void sparse_linear_pack(SparseLinearWeight& out, const float* W, const uint8_t* mask, int OC,
                        int IC) {
  SparseLinear::table().pack(out, W, mask, OC, IC);
}
void sparse_linear_refresh_values(SparseLinearWeight& packed, const float* W) {
  SparseLinear::table().refresh_values(packed, W);
}
void sparse_linear_forward(float* out, const float* inp, const SparseLinearWeight& weight,
                           const float* bias, int N) {
  SparseLinear::table().forward(out, inp, weight, bias, N);
}
void sparse_linear_backward_input(float* dinp, const float* dout, const SparseLinearWeight& weight,
                                  int N, bool accumulate) {
  SparseLinear::table().backward_input(dinp, dout, weight, N, accumulate);
}
void sparse_linear_backward_weight(float* dweight, const float* dout, const float* inp,
                                   const SparseLinearWeight& weight, int N) {
  SparseLinear::table().backward_weight(dweight, dout, inp, weight, N);
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       const AttentionPattern& pattern) {
  Attention::table().forward(out, lse, qkv, B, T, C, NH, pattern);
}
void attention_forward_bf16(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C,
                            int NH, const AttentionPattern& pattern) {
  Attention::table().forward_bf16(out, out16, lse, qkv, B, T, C, NH, pattern);
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH,
                        const AttentionPattern& pattern) {
  Attention::table().backward(dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
}
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH,
                             const AttentionPattern& pattern) {
  Attention::table().backward_bf16(dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
}
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int t, int C, int NH, const AttentionPattern& pattern) {
  Attention::table().decode(out, q, k_cache, v_cache, t, C, NH, pattern);
}

void gelu_forward(float* out, const float* inp, size_t n) {
  Activations::table().gelu_forward(out, inp, n);
}
void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  Activations::table().gelu_backward(dinp, dout, inp, n);
}
void relu2_forward(float* out, const float* inp, size_t n) { Activations::table().relu2_forward(out, inp, n); }
void relu2_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  Activations::table().relu2_backward(dinp, dout, inp, n);
}
void gated_forward(float* out, const float* gate, const float* up, size_t n, GateAct act) {
  Activations::table().gated_forward(out, gate, up, n, act);
}
void gated_backward(float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, size_t n, GateAct act) {
  Activations::table().gated_backward(dgate, dup, dout, gate, up, n, act);
}
void gelu_forward_bf16(bf16* out, const float* inp, size_t n) { Activations::table().gelu_forward_bf16(out, inp, n); }
void relu2_forward_bf16(bf16* out, const float* inp, size_t n) { Activations::table().relu2_forward_bf16(out, inp, n); }
void gated_forward_bf16(bf16* out, const float* gate, const float* up, size_t n, GateAct act) {
  Activations::table().gated_forward_bf16(out, gate, up, n, act);
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  Elementwise::table().residual_forward(out, a, b, n);
}
void dropout_apply(float* x, size_t n, float p, uint64_t key, size_t first) {
  Elementwise::table().dropout_apply(x, n, p, key, first);
}
void sum_squares_feed(SumSquaresStream& stream, const float* x, size_t n) {
  Elementwise::table().sum_squares_feed(stream, x, n);
}
double sum_squares_finish(const SumSquaresStream& stream) {
  return Elementwise::table().sum_squares_finish(stream);
}
double sum_squares(const float* x, size_t n) {
  SumSquaresStream stream;
  sum_squares_feed(stream, x, n);
  return sum_squares_finish(stream);
}
void scale_inplace(float* x, size_t n, float s) { Elementwise::table().scale_inplace(x, n, s); }

void lm_head_cross_entropy(float* losses, float* dinp, float* dweight, const float* inp,
                           const float* weight, const int32_t* targets, int N, int C, int V,
                           float dloss, float softcap, const LmHeadBias& bias) {
  LmHead::table().cross_entropy(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, softcap, bias);
}
void lm_head_cross_entropy_split(float* losses, float* dinp, float* dweight, const float* inp,
                                 const float* weight, const int32_t* targets, int N, int C, int V,
                                 float dloss, const VocabSplit& split, float softcap) {
  LmHead::table().cross_entropy_split(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, split, softcap);
}
void lm_head_logits(float* logits, const float* inp, const float* weight, int N, int C, int V,
                    const float* bias) {
  LmHead::table().logits(logits, inp, weight, N, C, V, bias);
}
void lm_head_softcap(float* logits, size_t n, float softcap) { LmHead::table().softcap(logits, n, softcap); }
void lm_head_cross_entropy_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                const bf16* weight, const int32_t* targets, int N, int C, int V,
                                float dloss, float softcap, const LmHeadBias& bias) {
  LmHead::table().cross_entropy_bf16(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, softcap, bias);
}
void lm_head_cross_entropy_split_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                      const bf16* weight, const int32_t* targets, int N, int C, int V,
                                      float dloss, const VocabSplit& split, float softcap) {
  LmHead::table().cross_entropy_split_bf16(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, split,
                                           softcap);
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                  bool decay) {
  Adamw::table().update(p, g, m, v, n, s, decay);
}
void adamw_update_bf16(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                       bool decay, const Bf16Rounding& rounding) {
  Adamw::table().update_bf16(p, p16, g, m, v, n, s, decay, rounding);
}

void newton_schulz(float* x, int R, int C, int steps) { NewtonSchulz::table().orthogonalise(x, R, C, steps); }
void newton_schulz_bf16(float* x, int R, int C, int steps) {
  NewtonSchulz::table().orthogonalise_bf16(x, R, C, steps);
}
void qk_transform_forward(float* qkv, float* inv_rms, int B, int T, int pos0, int C, int NH, const QkTransform& t) {
  QkTransformFamily::table().forward(qkv, inv_rms, B, T, pos0, C, NH, t);
}
void qk_transform_backward(float* dqkv, const float* qkv, const float* inv_rms, int B, int T, int C, int NH,
                           const QkTransform& t) {
  QkTransformFamily::table().backward(dqkv, qkv, inv_rms, B, T, C, NH, t);
}

void moe_router_forward(float* probs, float* lse, int32_t* expert, float* weight, const float* logits,
                        const float* bias, int N, int E, int k) {
  Moe::table().router_forward(probs, lse, expert, weight, logits, bias, N, E, k);
}
void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* expert, const float* weight, const float* dprobs, float dlse,
                         int N, int E, int k) {
  Moe::table().router_backward(dlogits, dweight, probs, lse, expert, weight, dprobs, dlse, N, E, k);
}
void moe_permute(float* out, const float* inp, const int32_t* src, int R, int C) {
  Moe::table().permute(out, inp, src, R, C);
}
void moe_unpermute(float* out, const float* inp, const int32_t* pos, const float* weight, int N, int k,
                   int C, bool accumulate) {
  Moe::table().unpermute(out, inp, pos, weight, N, k, C, accumulate);
}
void moe_unpermute_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                            const int32_t* pos, const float* weight, int N, int k, int C) {
  Moe::table().unpermute_backward(dinp, dweight, dout, inp, pos, weight, N, k, C);
}
void moe_grouped_forward(float* out, const float* inp, const float* weight, const float* bias,
                         const int32_t* offsets, int E, int C, int OC) {
  Moe::table().grouped_forward(out, inp, weight, bias, offsets, E, C, OC);
}
void moe_grouped_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const int32_t* offsets, int E, int C, int OC,
                          bool accumulate_dinp) {
  Moe::table().grouped_backward(dinp, dweight, dbias, dout, inp, weight, offsets, E, C, OC, accumulate_dinp);
}
void moe_grouped_forward_bf16(float* out, const float* inp, const bf16* weight, const float* bias,
                              const int32_t* offsets, int E, int C, int OC) {
  Moe::table().grouped_forward_bf16(out, inp, weight, bias, offsets, E, C, OC);
}
void moe_grouped_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const bf16* weight, const int32_t* offsets, int E, int C, int OC,
                               bool accumulate_dinp) {
  Moe::table().grouped_backward_bf16(dinp, dweight, dbias, dout, inp, weight, offsets, E, C, OC, accumulate_dinp);
}

}  // namespace frugal::kernels
