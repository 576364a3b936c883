// Benchmark of the encoder kernels (token + position embedding): GB/s of forward and backward on
// the model's shapes (B·T tokens, C channels, vocabulary V), next to the dense SGEMM rate measured
// in the same run.
// Bytes counted (float32, each row touched once; token ids are negligible):
//   forward  = wte row + wpe row read, out row written per token       = 4·3·B·T·C
//   backward = dout read, dwte row and dwpe row read and written (+=)  = 4·5·B·T·C
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_encoder [threads=2] [reps=20]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ops.h"

namespace {

using frugal::bench::best_seconds;
using frugal::bench::print_bandwidth;
using frugal::bench::random_floats;

void bench_encoder(int B, int T, int C, int V, int reps) {
  const size_t n = static_cast<size_t>(B) * T * C;
  frugal::Rng rng(7, 4);
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(V));
  const std::vector<float> wte = random_floats(static_cast<size_t>(V) * C, 0),
                           wpe = random_floats(static_cast<size_t>(T) * C, 1), dout = random_floats(n, 2);
  std::vector<float> out(n), dwte(wte.size()), dwpe(wpe.size());
  std::printf("encoder B=%d T=%d C=%d V=%d:", B, T, C, V);
  print_bandwidth("forward:", best_seconds([&] {
    frugal::kernels::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  }, reps), 4.0 * 3 * n);
  print_bandwidth(" backward:", best_seconds([&] {
    frugal::kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  }, reps), 4.0 * 5 * n);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const auto& p : frugal::bench::kPresets) bench_encoder(p.B, p.T, p.C, p.V, reps);
  frugal::bench::bench_sgemm(2048, 384, 384, reps);  // a linear of preset M's width
}
