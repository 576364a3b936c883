// Measured OpenBLAS SGEMM throughput (see blas_peak.h).
#include "frugal/kernels/cpu/blas_peak.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/timer.h"

namespace frugal::kernels::cpu {

double sgemm_gflops(int M, int N, int K, int reps) {
  std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N),
      c(static_cast<size_t>(M) * N);
  Rng rng(1, 0);
  for (auto& x : a) x = static_cast<float>(rng.uniform() - 0.5);
  for (auto& x : b) x = static_cast<float>(rng.uniform() - 0.5);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N,
                0.0f, c.data(), N);
  };
  run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    run();
    best = std::min(best, t.seconds());
  }
  return 2.0 * M * N * K / best * 1e-9;
}

}  // namespace frugal::kernels::cpu
