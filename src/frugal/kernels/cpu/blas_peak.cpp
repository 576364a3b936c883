// The engine SGEMM for benchmarks (see blas_peak.h).
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/cpu/blas_peak.h"


namespace frugal::kernels::cpu {

void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
  cpu::sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}

}  // namespace frugal::kernels::cpu
