// Dense linear layers on CPU through the one dense GEMM entry point (cpu/gemm.h: oneDNN or
// OpenBLAS); the bias gradient is a vectorised loop after the GEMMs (cpu/column_sums.h).

#include "frugal/kernels/cpu/column_sums.h"
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
    add_column_sums(dbias, dout, N, OC, [](int) {});
  }
}

}  // namespace

const MatmulKernels matmul_avx2{&matmul_forward, &matmul_backward};

}  // namespace frugal::kernels::cpu
