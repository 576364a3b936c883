// The engine SGEMM for benchmarks and the measured GEMM peak (see blas_peak.h).
#include "frugal/kernels/cpu/blas_peak.h"

#include <algorithm>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels::cpu {

void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
  cpu::sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}

double measure_gemm_peak_flops() {
  // A square shape large enough for the BLAS to reach steady state (a linear forward with
  // N = C = OC = 1536).
  const int n = 1536;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    Timer t;
    matmul_forward(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::min(best, t.seconds());
  }
  return 2.0 * n * double(n) * n / best;
}

}  // namespace frugal::kernels::cpu
