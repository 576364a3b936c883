// What the kernel benchmarks (bench/bench_<family>.cpp) share: the best wall-clock time of
// repeated calls (the machine is shared: the best call is the one least disturbed by other
// processes), random inputs, one-line rates, and the SGEMM rate of frugal's dense GEMM library
// (kernels/cpu/gemm.h: oneDNN by default, FRUGAL_GEMM=openblas) measured in the same run, the
// machine's practical peak to read the kernels' rates against.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/blas_peak.h"
#include "frugal/kernels/cpu/gemm.h"
#include "step_shapes.h"

namespace frugal::bench {

// The command line of every kernel benchmark, `[threads=2] [reps=default_reps]`: sets the thread
// count, prints both and returns reps.
inline int start(int argc, char** argv, int default_reps = 20) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : default_reps;
  set_num_threads(threads);
  std::printf("threads=%d reps=%d\n", threads, reps);
  return reps;
}

// Best wall-clock seconds over `reps` calls, after one warm-up call.
template <class F>
double best_seconds(F&& call, int reps) {
  call();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    call();
    best = std::min(best, t.seconds());
  }
  return best;
}

// Each call's median wall-clock seconds over `reps` rounds that run every call in turn (so all see
// the same machine load), after one untimed call of each (a shape's first call pays packing
// buffers and, for oneDNN, the primitive's creation).
inline std::vector<double> interleaved_median_seconds(const std::vector<std::function<void()>>& calls, int reps) {
  for (const auto& call : calls) call();
  std::vector<std::vector<double>> seconds(calls.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < calls.size(); ++i) {
      Timer t;
      calls[i]();
      seconds[i].push_back(t.seconds());
    }
  std::vector<double> medians;
  for (const auto& s : seconds) medians.push_back(median(s));
  return medians;
}

// A row of a per-shape GEMM table: the preset, the shape, and each path's GFLOP/s from its median
// seconds; adds each path's milliseconds per training step (the shape's time × its runs per step)
// to step_ms.
inline void print_gemm_row(const char* preset, const GemmShape& s, const std::vector<double>& medians,
                           std::vector<double>& step_ms) {
  std::printf("%s %-9s %-9s %5d %5d %5d", preset, s.layer, s.pass, s.M, s.N, s.K);
  for (size_t i = 0; i < medians.size(); ++i) {
    std::printf(" %11.1f", s.flops() / medians[i] * 1e-9);
    step_ms[i] += medians[i] * 1e3 * s.per_step;
  }
  std::printf("\n");
}

// "  <what> <ms> ms = <rate> GFLOP/s" for `flops` floating-point operations in `seconds`.
inline void print(const char* what, double seconds, double flops) {
  std::printf("  %s %.3f ms = %.1f GFLOP/s", what, seconds * 1e3, flops / seconds * 1e-9);
}

// "  <what> <ms> ms = <rate> GB/s" for `bytes` read and written in `seconds`.
inline void print_bandwidth(const char* what, double seconds, double bytes) {
  std::printf("  %s %.3f ms = %.1f GB/s", what, seconds * 1e3, bytes / seconds * 1e-9);
}

// n floats uniform in [-1, 1), one stream per input.
inline std::vector<float> random_floats(size_t n, uint64_t stream) {
  Rng rng(7, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2 * rng.uniform() - 1);
  return v;
}

// One line: the dense SGEMM C (M,N) = A (M,K) · B (K,N), 2·M·N·K FLOPs.
inline void bench_sgemm(int M, int N, int K, int reps) {
  const std::vector<float> a = random_floats(static_cast<size_t>(M) * K, 2),
                           b = random_floats(static_cast<size_t>(K) * N, 3);
  std::vector<float> c(static_cast<size_t>(M) * N);
  std::printf("%s sgemm M=%d N=%d K=%d:", kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend()), M,
              N, K);
  print("", best_seconds([&] { kernels::cpu::reference_sgemm(M, N, K, a.data(), b.data(), c.data()); }, reps),
        2.0 * M * N * K);
  std::printf("\n");
}

}  // namespace frugal::bench
