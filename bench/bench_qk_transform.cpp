// Benchmark of the qk_transform kernel family (QK-norm + rotary position embeddings) on the presets'
// attention shapes (B·T rows of qkv), forward and backward, in GB/s of the q and k parts read and
// written, next to the time of the qkv projection it follows (an SGEMM of the same rows), so the
// transform's share of the attention branch is visible. Best of `reps` (bench/kernel_bench.h).
// Usage: bench_qk_transform [threads=2] [reps=20]
#include <cstdio>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/bench/step_shapes.h"
#include "frugal/kernels/ops.h"

namespace {

using frugal::bench::best_seconds;
using frugal::bench::random_floats;
namespace k = frugal::kernels;

void bench_shape(const frugal::bench::PresetShape& p, int reps) {
  const int B = p.B, T = p.T, C = p.C, NH = p.heads;
  const k::QkTransform t{.norm = true, .rotary = true};
  const size_t N = size_t(B) * T;
  const std::vector<float> x = random_floats(N * 3 * C, 1);
  std::vector<float> qkv = x, dqkv = random_floats(x.size(), 2), inv_rms(N * 2 * NH);
  const double bytes = 2.0 * N * 2 * C * sizeof(float);  // the q and k parts, read and written
  const double forward = best_seconds([&] {
    qkv = x;
    k::qk_transform_forward(qkv.data(), inv_rms.data(), B, T, 0, C, NH, t);
  }, reps);
  const double backward = best_seconds([&] {
    k::qk_transform_backward(dqkv.data(), qkv.data(), inv_rms.data(), B, T, C, NH, t);
  }, reps);
  std::printf("qk_transform preset %s (B %d, T %d, C %d, NH %d): forward %.3f ms (%.1f GB/s), backward %.3f ms (%.1f GB/s)\n",
              p.name, B, T, C, NH, forward * 1e3, bytes / forward / 1e9, backward * 1e3, bytes / backward / 1e9);
  frugal::bench::bench_sgemm(static_cast<int>(N), 3 * C, C, reps);  // the qkv projection of the same rows
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const frugal::bench::PresetShape& p : frugal::bench::kPresets) bench_shape(p, reps);
}
