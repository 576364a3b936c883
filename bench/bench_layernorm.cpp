// Benchmark of the layernorm kernels: GB/s of forward and backward on the model's activation
// shapes (N = B·T rows of C channels), next to the dense SGEMM rate measured in the same run.
// Bytes counted (float32, each activation tensor read or written once; the (C) parameters and
// their gradients are negligible):
//   forward  = inp read + out written + mean, rstd written         = 4·(2·N·C + 2·N)
//   forward with a bf16 output (train.precision = "bf16": the linears' input) = 4·(1.5·N·C + 2·N)
//   backward = dout, inp read + dinp read and written (it adds) + mean, rstd read
//                                                                   = 4·(4·N·C + 2·N)
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_layernorm [threads=2] [reps=20]
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

void bench_layernorm(int N, int C, int reps) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> inp = random_floats(n, 0), dout = random_floats(n, 1),
                           weight = random_floats(C, 2), bias = random_floats(C, 3);
  std::vector<float> out(n), mean(N), rstd(N), dinp(n), dweight(C), dbias(C);
  std::printf("layernorm N=%d C=%d:", N, C);
  print_bandwidth("forward:", best_seconds([&] {
    frugal::kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                       bias.data(), N, C, 1e-5f);
  }, reps), 4.0 * (2.0 * n + 2.0 * N));
  std::vector<frugal::kernels::bf16> out16(n);
  print_bandwidth(" forward bf16:", best_seconds([&] {
    frugal::kernels::layernorm_forward_bf16(out16.data(), nullptr, mean.data(), rstd.data(), inp.data(), weight.data(),
                                            bias.data(), N, C, 1e-5f);
  }, reps), 4.0 * (1.5 * n + 2.0 * N));
  print_bandwidth(" backward:", best_seconds([&] {
    frugal::kernels::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                        weight.data(), mean.data(), rstd.data(), N, C);
  }, reps), 4.0 * (4.0 * n + 2.0 * N));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const auto& p : frugal::bench::kPresets) bench_layernorm(p.rows(), p.C, reps);
  frugal::bench::bench_sgemm(2048, 384, 384, reps);  // a linear of preset M's width
}
