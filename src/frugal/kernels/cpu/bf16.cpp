// The bf16 family on the CPU: the linear's GEMMs on oneDNN's bf16 matmul where it has a JIT kernel
// for this CPU (cpu/gemm.h), else fp32 GEMMs on the operands widened to float (exact products, so
// both agree up to the order of the sums); and the AVX2 table, whose conversions are the
// baseline's vectorised loops (bf16_convert.h).
#include "frugal/kernels/cpu/bf16.h"

#include <vector>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/bf16_convert.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"

namespace frugal::kernels::cpu {
namespace {

bool onednn_has_bf16() {
  static const bool has = !onednn_bf16_matmul_isa().empty();
  return has;
}

// The operand widened to float, in a buffer of the calling thread kept between calls.
const float* widened(const bf16* x, size_t n, std::vector<float>& buffer) {
  buffer.resize(n);
  bf16_to_f32_loop(buffer.data(), x, n);
  return buffer.data();
}

}  // namespace

void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C,
                         int OC) {
  FRUGAL_PROFILE("matmul bf16 fwd");
  // out (N,OC) = inp (N,C) · weight (OC,C)ᵀ [+ bias]
  if (onednn_has_bf16()) {
    onednn_matmul_bf16(false, true, N, OC, C, inp, C, weight, C, bias, false, out, OC);
    return;
  }
  thread_local std::vector<float> x, w;
  gemm_nt_bias(N, OC, C, widened(inp, size_t(N) * C, x), widened(weight, size_t(OC) * C, w), bias, out);
}

void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                          int N, int C, int OC, bool accumulate_dinp) {
  FRUGAL_PROFILE("matmul bf16 bwd");
  const bool native = onednn_has_bf16();
  thread_local std::vector<float> dy, x, w;
  const float* dout_f = native ? nullptr : widened(dout, size_t(N) * OC, dy);
  if (dinp) {  // dinp (N,C) = dout (N,OC) · weight (OC,C)
    FRUGAL_PROFILE("matmul bf16 bwd: input grad");
    if (native)
      onednn_matmul_bf16(false, false, N, C, OC, dout, OC, weight, C, nullptr, accumulate_dinp, dinp, C);
    else
      sgemm(false, false, N, C, OC, 1.0f, dout_f, OC, widened(weight, size_t(OC) * C, w), C,
            accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  }
  if (dweight) {  // dweight (OC,C) += dout ᵀ (OC,N) · inp (N,C)
    FRUGAL_PROFILE("matmul bf16 bwd: weight grad");
    if (native)
      onednn_matmul_bf16(true, false, OC, C, N, dout, OC, inp, C, nullptr, true, dweight, C);
    else
      sgemm(true, false, OC, C, N, 1.0f, dout_f, OC, widened(inp, size_t(N) * C, x), C, 1.0f, dweight, C);
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
               bool accumulate, float* C, int ldc) {
  if (onednn_has_bf16()) {
    onednn_matmul_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, nullptr, accumulate, C, ldc);
    return;
  }
  thread_local std::vector<float> a, b;
  sgemm(trans_a, trans_b, M, N, K, 1.0f, widened(A, size_t(trans_a ? K : M) * lda, a), lda,
        widened(B, size_t(trans_b ? N : K) * ldb, b), ldb, accumulate ? 1.0f : 0.0f, C, ldc);
}

const Bf16Kernels bf16_avx2{&f32_to_bf16_loop,           &round_to_bf16_loop,  &bf16_to_f32_loop,
                            &f32_to_bf16_bias_grad_loop, &matmul_bf16_forward, &matmul_bf16_backward,
                            &onednn_bf16_matmul_isa};

}  // namespace frugal::kernels::cpu
