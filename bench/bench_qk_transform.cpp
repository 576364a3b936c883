// Benchmark of the qk_transform kernel family (QK-norm + rotary position embeddings) on the presets'
// attention shapes (B·T rows of qkv), forward and backward, in GB/s of the q and k parts (and in the
// backward their gradients) read and written, next to the time of the qkv projection it follows (an
// SGEMM of the same rows), so the transform's share of the attention branch is visible. Best of
// `reps` (bench/kernel_bench.h).
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
  // In place, so each repetition transforms the last one's output: normalising and rotating it
  // again is the same work, and no copy of the input is timed with it.
  const double forward = best_seconds([&] {
    k::qk_transform_forward(qkv.data(), inv_rms.data(), B, T, 0, C, NH, t);
  }, reps);
  const double backward = best_seconds([&] {
    k::qk_transform_backward(dqkv.data(), qkv.data(), inv_rms.data(), B, T, C, NH, t);
  }, reps);
  const double qk = double(N) * 2 * C * sizeof(float);  // the bytes of the q and k parts
  // forward: q and k read and written; backward: their gradients read and written, the
  // transformed q and k read (inv_rms, N·2·NH floats, left out).
  std::printf("qk_transform preset %s (B %d, T %d, C %d, NH %d): forward %.3f ms (%.1f GB/s), backward %.3f ms (%.1f GB/s)\n",
              p.name, B, T, C, NH, forward * 1e3, 2 * qk / forward / 1e9, backward * 1e3, 3 * qk / backward / 1e9);
  frugal::bench::bench_sgemm(static_cast<int>(N), 3 * C, C, reps);  // the qkv projection of the same rows
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const frugal::bench::PresetShape& p : frugal::bench::kPresets) bench_shape(p, reps);
}
