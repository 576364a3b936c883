// gemm_library_rate: the SGEMM rate of one library on every GEMM shape of the `frugal bench`
// presets' training steps (bench/step_shapes.h), for tools/compare_gemm_libraries.sh, which
// compiles this file once per library (GEMM_API: -DGEMM_CBLAS for cblas_sgemm from OpenBLAS or MKL,
// else oneDNN's dnnl_sgemm) and runs the builds alternately. Not part of the CMake build: it is
// linked against libraries frugal does not use. Prints one line per shape:
//   <preset> <layer> <pass> <M> <N> <K> <per_step> <median seconds>
// Usage: gemm_library_rate [threads=2] [repetitions=9]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef GEMM_CBLAS
#include <cblas.h>
#else
#include <oneapi/dnnl/dnnl.h>
#endif

#include "step_shapes.h"

namespace {

void sgemm(const frugal::bench::GemmShape& s, const float* A, const float* B, float* C) {
  const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
#ifdef GEMM_CBLAS
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N,
              s.K, 1.0f, A, lda, B, ldb, s.beta, C, s.N);
#else
  dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.M, s.N, s.K, 1.0f, A, lda, B, ldb, s.beta, C, s.N);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 9;
  omp_set_num_threads(threads);
  for (const auto& preset : frugal::bench::kPresets)
    for (const auto& s : frugal::bench::step_gemm_shapes(preset)) {
      std::vector<float> a(size_t(s.M) * s.K), b(size_t(s.K) * s.N), c(size_t(s.M) * s.N, 0.0f);
      for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 17) / 17.0f - 0.5f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 13) / 13.0f - 0.5f;
      sgemm(s, a.data(), b.data(), c.data());  // untimed: packing buffers, kernel generation
      std::vector<double> seconds;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        sgemm(s, a.data(), b.data(), c.data());
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(seconds.begin(), seconds.end());
      std::printf("%s %s %s %d %d %d %d %.9f\n", preset.name, s.layer, s.pass, s.M, s.N, s.K, s.per_step,
                  seconds[reps / 2]);
    }
  return 0;
}
