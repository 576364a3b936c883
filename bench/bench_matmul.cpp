// bench_matmul: the matmul family's GEMM paths on every GEMM shape of a `frugal bench` preset's
// training step (each linear layer's forward, input gradient and weight gradient, and the LM head's
// three when the vocabulary is large): OpenBLAS (OpenMP build), oneDNN's dnnl_sgemm, oneDNN's
// matmul primitive (created once per shape), and the path kernels/cpu/gemm.cpp's sgemm chooses.
// Calls are interleaved and repeated so all see the same machine load; prints the median GFLOP/s
// (2·M·N·K / time) of each, and per preset the GEMM milliseconds of one step for each path
// (shapes weighted by how often a step runs them; bench/step_shapes.h). Built only when oneDNN is
// found. tools/compare_gemm_libraries.sh compares other libraries (MKL, oneDNN 3.x from PyPI).
// Usage: bench_matmul [threads=2] [repetitions=15]
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernel_bench.h"

namespace {

namespace cpu = frugal::kernels::cpu;

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv, 15);
  const char* paths[] = {"OpenBLAS", "dnnl_sgemm", "dnnl matmul", "sgemm()"};
  std::printf("%-21s %5s %5s %5s %11s %11s %11s %11s  (GFLOP/s)\n", "shape", "M", "N", "K", paths[0], paths[1],
              paths[2], paths[3]);
  for (const auto& preset : frugal::bench::kPresets) {
    std::vector<double> step_ms(4, 0.0);
    for (const frugal::bench::GemmShape& s : frugal::bench::step_gemm_shapes(preset)) {
      auto a = frugal::bench::random_floats(size_t(s.M) * s.K, 1), b = frugal::bench::random_floats(size_t(s.K) * s.N, 2);
      std::vector<float> c(size_t(s.M) * s.N, 0.0f);
      const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
      const std::vector<std::function<void()>> calls = {
          [&] {
            cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N,
                        s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N);
          },
          [&] { cpu::onednn_sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N); },
          [&] { cpu::onednn_matmul(s.trans_a, s.trans_b, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, nullptr, s.beta != 0, c.data(), s.N); },
          [&] { cpu::sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N); },
      };
      frugal::bench::print_gemm_row(preset.name, s, frugal::bench::interleaved_median_seconds(calls, reps), step_ms);
    }
    std::printf("%s: GEMM ms per training step", preset.name);
    for (size_t i = 0; i < step_ms.size(); ++i) std::printf("  %s %.1f", paths[i], step_ms[i]);
    std::printf("\n");
  }
  return 0;
}
