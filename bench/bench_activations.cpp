// Benchmark of the activations kernels (GELU, and the gated GEGLU / SwiGLU): GB/s of forward and
// backward on the MLP's hidden activations (N = B·T rows of H = 4·C), next to the dense SGEMM
// rate measured in the same run.
// Bytes counted (float32, n = N·H values, each tensor read or written once):
//   gelu  forward  = inp read, out written                          = 4·2·n
//   gelu  backward = dout, inp read, dinp written                   = 4·3·n
//   relu2 forward and backward: as gelu
//   gated forward  = gate, up read, out written                     = 4·3·n
//   gated backward = dout, gate, up read, dgate, dup written        = 4·5·n
//   the forwards writing bf16 (train.precision = "bf16": the projection's input): 2 bytes less per
//   output value (gelu, relu2 4·1.5·n, gated 4·2.5·n)
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_activations [threads=2] [reps=20]
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ops.h"

namespace {

namespace k = frugal::kernels;
using frugal::bench::best_seconds;
using frugal::bench::print_bandwidth;
using frugal::bench::random_floats;

void bench_activations(int N, int C, int reps) {
  const size_t n = static_cast<size_t>(N) * 4 * C;
  const std::vector<float> gate = random_floats(n, 0), up = random_floats(n, 1), dout = random_floats(n, 2);
  std::vector<float> out(n), dgate(n), dup(n);
  std::vector<k::bf16> out16(n);
  std::printf("gelu N=%d H=%d:", N, 4 * C);
  print_bandwidth("forward:", best_seconds([&] { k::gelu_forward(out.data(), gate.data(), n); }, reps), 4.0 * 2 * n);
  print_bandwidth(" forward bf16:", best_seconds([&] { k::gelu_forward_bf16(out16.data(), gate.data(), n); }, reps),
                  4.0 * 1.5 * n);
  print_bandwidth(" backward:", best_seconds([&] {
    k::gelu_backward(dgate.data(), dout.data(), gate.data(), n);
  }, reps), 4.0 * 3 * n);
  std::printf("\n");
  std::printf("relu2 N=%d H=%d:", N, 4 * C);
  print_bandwidth("forward:", best_seconds([&] { k::relu2_forward(out.data(), gate.data(), n); }, reps), 4.0 * 2 * n);
  print_bandwidth(" forward bf16:", best_seconds([&] { k::relu2_forward_bf16(out16.data(), gate.data(), n); }, reps),
                  4.0 * 1.5 * n);
  print_bandwidth(" backward:", best_seconds([&] {
    k::relu2_backward(dgate.data(), dout.data(), gate.data(), n);
  }, reps), 4.0 * 3 * n);
  std::printf("\n");
  for (auto [act, name] : {std::pair{k::GateAct::Gelu, "geglu"}, std::pair{k::GateAct::Silu, "swiglu"}}) {
    std::printf("%s N=%d H=%d:", name, N, 4 * C);
    print_bandwidth("forward:", best_seconds([&] {
      k::gated_forward(out.data(), gate.data(), up.data(), n, act);
    }, reps), 4.0 * 3 * n);
    print_bandwidth(" forward bf16:", best_seconds([&] {
      k::gated_forward_bf16(out16.data(), gate.data(), up.data(), n, act);
    }, reps), 4.0 * 2.5 * n);
    print_bandwidth(" backward:", best_seconds([&] {
      k::gated_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n, act);
    }, reps), 4.0 * 5 * n);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const auto& p : frugal::bench::kPresets) bench_activations(p.rows(), p.C, reps);
  frugal::bench::bench_sgemm(2048, 1536, 384, reps);  // preset M's fc: N x 4C x C
}
