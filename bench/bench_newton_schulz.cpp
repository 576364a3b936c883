// Benchmark of the newton_schulz kernel family (Muon's orthogonalisation): time and GFLOP/s of the
// fp32 and the bf16 variant on the block linears of the Tiny Shakespeare quickstart (C 192) and the
// presets M and L (5 iterations), next to the dense SGEMM rate and the symmetric product (ssyrk)
// against the SGEMM of the same Gram matrix, measured in the same run.
// FLOPs counted per iteration as each variant executes them, m = min(R,C), n = max(R,C): fp32
// 3·m²·n + m³ (the Gram matrix and its square by ssyrk, one general product with the (m,n)
// matrix), bf16 4·m²·n + 2·m³ (three general products).
// Then a whole Muon step (optim/muon.h's muon_update) over every hidden matrix of the quickstart's
// and preset M's blocks: one call per tensor (each tensor's products on all threads) against one
// call for all of them (whole tensors spread over the threads).
// The Newton–Schulz rates are the best wall-clock time of `reps` calls; the two pairs printed as a
// ratio (sgemm/ssyrk, the Muon step's two ways) are medians of `reps` rounds that run both in turn
// (bench/kernel_bench.h), so that both saw the same load.
// Usage: bench_newton_schulz [threads=2] [reps=20]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/ops.h"
#include "frugal/optim/muon.h"

namespace {

using frugal::bench::best_seconds;
using frugal::bench::interleaved_median_seconds;
using frugal::bench::random_floats;

void bench_newton_schulz(const char* what, int R, int C, int reps) {
  const std::vector<float> g = random_floats(size_t(R) * C, 1);
  std::vector<float> x = g;
  const int steps = 5;
  const double m = std::min(R, C), n = std::max(R, C);
  for (const bool bf16 : {false, true}) {
    const double flops = steps * (bf16 ? 4 * m * m * n + 2 * m * m * m : 3 * m * m * n + m * m * m);
    const double s = best_seconds([&] {
      x = g;
      (bf16 ? frugal::kernels::newton_schulz_bf16 : frugal::kernels::newton_schulz)(x.data(), R, C, steps);
    }, reps);
    std::printf("newton_schulz%s %s (%d,%d) x%d: %.2f ms, %.1f GFLOP/s\n", bf16 ? "_bf16" : "", what, R, C, steps,
                s * 1e3, flops / s / 1e9);
  }
}

// One Muon step over `layers` blocks of width C (qkv, attention proj, fc, fc proj: 4 tensors a block).
void bench_muon_step(const char* what, int layers, int C, int reps) {
  std::vector<std::pair<int, int>> shapes;
  for (int l = 0; l < layers; ++l)
    for (auto shape : {std::pair{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}}) shapes.push_back(shape);
  std::vector<std::vector<float>> params, grads, buffers;
  std::vector<frugal::MuonTensor> tensors;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const size_t n = size_t(shapes[i].first) * shapes[i].second;
    params.push_back(random_floats(n, 2 * i + 1));
    grads.push_back(random_floats(n, 2 * i + 2));
    buffers.emplace_back(n, 0.0f);
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    tensors.push_back({params[i].data(), grads[i].data(), buffers[i].data(), {1, shapes[i].first, shapes[i].second}});
  const frugal::MuonConfig c{.enabled = true};
  const std::vector<double> s = interleaved_median_seconds(
      {[&] {
         for (const frugal::MuonTensor& t : tensors) frugal::muon_update({t}, c, 0.02f);
       },
       [&] { frugal::muon_update(tensors, c, 0.02f); }},
      reps);
  const double one_at_a_time = s[0], together = s[1];
  std::printf("muon step, %s (%d blocks, width %d, %zu tensors): %.2f ms one tensor at a time, %.2f ms "
              "together: %.2fx\n", what, layers, C, tensors.size(), one_at_a_time * 1e3, together * 1e3,
              one_at_a_time / together);
}

// The Gram matrix A (m,m) = X·Xᵀ of X (m,n): ssyrk against sgemm, m·m·n and 2·m·m·n FLOPs, both
// rates as the FLOPs of the general product (what ssyrk saves shows as a higher rate).
void bench_gram(int m, int n, int reps) {
  const std::vector<float> x = random_floats(size_t(m) * n, 4);
  std::vector<float> a(size_t(m) * m);
  const std::vector<double> s = interleaved_median_seconds(
      {[&] { frugal::kernels::cpu::sgemm(false, true, m, m, n, 1.0f, x.data(), n, x.data(), n, 0.0f, a.data(), m); },
       [&] { frugal::kernels::cpu::ssyrk(false, m, n, 1.0f, x.data(), n, 0.0f, a.data(), m); }},
      reps);
  const double sgemm_s = s[0], ssyrk_s = s[1];
  const double flops = 2.0 * m * m * n;
  std::printf("Gram matrix (%d,%d)·(%d,%d)ᵀ: sgemm %.3f ms (%.1f GFLOP/s), ssyrk %.3f ms (%.1f GFLOP/s as the "
              "general product's FLOPs): %.2fx\n", m, n, m, n, sgemm_s * 1e3, flops / sgemm_s / 1e9, ssyrk_s * 1e3,
              flops / ssyrk_s / 1e9, sgemm_s / ssyrk_s);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (int C : {192, 384, 768}) {
    std::printf("%s:\n", C == 192 ? "quickstart" : C == 384 ? "preset M" : "preset L");
    bench_newton_schulz("qkv", 3 * C, C, reps);
    bench_newton_schulz("attn proj", C, C, reps);
    bench_newton_schulz("fc", 4 * C, C, reps);
    bench_newton_schulz("fc proj", C, 4 * C, reps);
  }
  frugal::bench::bench_sgemm(2048, 384, 384, reps);  // a linear of preset M's width
  for (int C : {192, 384, 768}) bench_gram(C, 4 * C, reps);
  bench_muon_step("quickstart", 4, 192, reps);
  bench_muon_step("preset M", 6, 384, reps);
}
