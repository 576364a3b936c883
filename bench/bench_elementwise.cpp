// Benchmark of the elementwise kernels (residual add, dropout, scaling, sum of squares): GB/s on
// the residual stream (N = B·T rows of C) and, for the gradient-norm pieces, on all parameters of
// preset L, next to the dense SGEMM rate measured in the same run.
// Bytes counted (float32, n values, each tensor read or written once):
//   residual_forward = a, b read, out written                   = 4·3·n
//   dropout_apply    = x read and written (p = 0.1)             = 4·2·n
//   scale_inplace    = x read and written                       = 4·2·n
//   sum_squares      = x read                                   = 4·n
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_elementwise [threads=2] [reps=20]
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ops.h"

namespace {

namespace k = frugal::kernels;
using frugal::bench::best_seconds;
using frugal::bench::print_bandwidth;
using frugal::bench::random_floats;

void bench_residual_dropout(int N, int C, int reps) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> a = random_floats(n, 0), b = random_floats(n, 1);
  std::vector<float> out(n);
  std::printf("residual/dropout N=%d C=%d:", N, C);
  print_bandwidth("residual:", best_seconds([&] { k::residual_forward(out.data(), a.data(), b.data(), n); }, reps),
                  4.0 * 3 * n);
  print_bandwidth(" dropout:", best_seconds([&] { k::dropout_apply(out.data(), n, 0.1f, 42); }, reps), 4.0 * 2 * n);
  std::printf("\n");
}

void bench_grad_norm(size_t n, int reps) {
  std::vector<float> g = random_floats(n, 2);
  std::printf("gradient norm n=%zu:", n);
  volatile double sink = 0;
  print_bandwidth("sum_squares:", best_seconds([&] { sink = k::sum_squares(g.data(), n); }, reps), 4.0 * n);
  // A scale of 1 keeps the values (and later calls) the same.
  print_bandwidth(" scale_inplace:", best_seconds([&] { k::scale_inplace(g.data(), n, 1.0f); }, reps), 4.0 * 2 * n);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const auto& p : frugal::bench::kPresets) bench_residual_dropout(p.rows(), p.C, reps);
  bench_grad_norm(124'000'000, reps);                // preset L's parameters (GPT-2 small, ~124M)
  frugal::bench::bench_sgemm(2048, 384, 384, reps);  // a linear of preset M's width
}
