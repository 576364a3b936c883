// Benchmark of the adamw kernel (the fused AdamW update): GB/s over the parameters of the presets,
// next to the dense SGEMM rate measured in the same run.
// Bytes counted (float32, n parameters): p, g, m, v read, p, m, v written = 4·7·n; with the bf16
// working copy written too (adamw_update_bf16, rounded to nearest or stochastically:
// train.bf16_rounding) 4·7·n + 2·n, against adamw_update followed by the rounding pass it replaces
// (f32_to_bf16: 4·n read, 2·n written).
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_adamw [threads=2] [reps=20]
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ops.h"

namespace {

using frugal::bench::best_seconds;
using frugal::bench::print_bandwidth;
using frugal::bench::random_floats;

void bench_adamw(const char* what, size_t n, int reps) {
  std::vector<float> p = random_floats(n, 0), m = random_floats(n, 2), v = random_floats(n, 3);
  const std::vector<float> g = random_floats(n, 1);
  for (float& x : v) x = std::fabs(x);
  const frugal::kernels::AdamWStep step{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  std::printf("adamw %s n=%zu:", what, n);
  print_bandwidth("", best_seconds([&] {
    frugal::kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), n, step, true);
  }, reps), 4.0 * 7 * n);
  std::vector<frugal::kernels::bf16> p16(n);
  for (const bool stochastic : {false, true}) {
    const frugal::kernels::Bf16Rounding rounding{.stochastic = stochastic, .seed = 1};
    print_bandwidth(stochastic ? " with stochastically rounded bf16 copy:" : " with bf16 copy:", best_seconds([&] {
      frugal::kernels::adamw_update_bf16(p.data(), p16.data(), g.data(), m.data(), v.data(), n, step, true, rounding);
    }, reps), 4.0 * 7 * n + 2.0 * n);
  }
  print_bandwidth(" update then rounding pass:", best_seconds([&] {
    frugal::kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), n, step, true);
    frugal::kernels::f32_to_bf16(p16.data(), p.data(), n);
  }, reps), 4.0 * 7 * n + 6.0 * n);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  bench_adamw("preset S (~0.8M)", 800'000, reps);
  bench_adamw("preset M (~10.7M)", 10'700'000, reps);
  bench_adamw("preset L (~124M)", 124'000'000, reps);
  frugal::bench::bench_sgemm(2048, 384, 384, reps);  // a linear of preset M's width
}
