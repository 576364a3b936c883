// Dense linear layers on CPU through the one dense GEMM entry point (cpu/gemm.h: oneDNN or
// OpenBLAS); the bias gradient is a vectorised loop after the GEMMs.

#include <algorithm>
#include <vector>

#include "frugal/kernels/cpu/gemm.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  FRUGAL_PROFILE("matmul fwd");
  // out (N,OC) = inp (N,C) · weight (OC,C)ᵀ [+ bias]
  cpu::gemm_nt_bias(N, OC, C, inp, weight, bias, out);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate_dinp) {
  FRUGAL_PROFILE("matmul bwd");
  if (dinp) {  // dinp (N,C) = dout (N,OC) · weight (OC,C)
    FRUGAL_PROFILE("matmul bwd: input grad");
    cpu::sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  }
  if (dweight) {  // dweight (OC,C) += dout ᵀ (OC,N) · inp (N,C)
    FRUGAL_PROFILE("matmul bwd: weight grad");
    cpu::sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias) {
    FRUGAL_PROFILE("matmul bwd: bias grad");
    // Column sums of dout: fixed chunks of rows are summed contiguously (streaming reads), then
    // the chunk partials are added in chunk order, so the result does not depend on threads.
    constexpr int kRows = 64;
    const int chunks = (N + kRows - 1) / kRows;
    std::vector<float> partial(static_cast<size_t>(chunks) * OC, 0.0f);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * OC >= (1 << 16))
    for (int ch = 0; ch < chunks; ++ch) {
      float* acc = partial.data() + static_cast<size_t>(ch) * OC;
      for (int i = ch * kRows; i < std::min(N, (ch + 1) * kRows); ++i) {
        const float* d = dout + static_cast<size_t>(i) * OC;
#pragma omp simd
        for (int o = 0; o < OC; ++o) acc[o] += d[o];
      }
    }
    for (int ch = 0; ch < chunks; ++ch) {
      const float* acc = partial.data() + static_cast<size_t>(ch) * OC;
#pragma omp simd
      for (int o = 0; o < OC; ++o) dbias[o] += acc[o];
    }
  }
}

}  // namespace

const MatmulKernels matmul_avx2{&matmul_forward, &matmul_backward};

}  // namespace frugal::kernels::cpu
