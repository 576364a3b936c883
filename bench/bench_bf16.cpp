// Benchmark of the bf16 kernel family (ops.h section bf16): the conversions' bandwidth (the
// stochastic rounding of train.bf16_rounding too), and on every GEMM shape of a `frugal bench`
// preset's training step (bench/step_shapes.h: each linear's forward, input gradient and weight
// gradient, and the LM head's three) the family's bf16 GEMM, cpu::gemm_bf16 (oneDNN's bf16 matmul
// where the CPU has a JIT kernel for it, else fp32 GEMMs on widened operands: the path
// kernels::bf16_matmul_path() names), against frugal's fp32 GEMM of the same shape. The weight
// gradient's shapes also run with A = doutᵀ laid out plainly (transposed while it is rounded), to
// show what oneDNN's transposed-A bf16 path costs; and each linear's output gradient rounded with
// its bias gradient in one pass (f32_to_bf16_bias_grad) against two. Calls are interleaved so all
// see the same load; prints median GFLOP/s (2·M·N·K / time) and per preset the GEMM milliseconds
// of one step.
// Usage: bench_bf16 [threads=2] [repetitions=9]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/ops.h"
#include "kernel_bench.h"

namespace {

namespace k = frugal::kernels;
namespace cpu = frugal::kernels::cpu;

std::vector<k::bf16> rounded(const std::vector<float>& x) {
  std::vector<k::bf16> out(x.size());
  k::f32_to_bf16(out.data(), x.data(), x.size());
  return out;
}

void bench_conversions(int reps) {
  const size_t n = size_t(16) << 20;
  const auto x = frugal::bench::random_floats(n, 3);
  std::vector<k::bf16> b(n);
  std::vector<float> y(n);
  std::printf("conversions of %zu values:", n);
  frugal::bench::print_bandwidth("f32_to_bf16", frugal::bench::best_seconds([&] { k::f32_to_bf16(b.data(), x.data(), n); }, reps),
                                 6.0 * n);
  const k::Bf16Rounding stochastic{.stochastic = true, .seed = 1};
  frugal::bench::print_bandwidth(" round_to_bf16 stochastic", frugal::bench::best_seconds([&] {
    k::round_to_bf16(b.data(), x.data(), n, stochastic);
  }, reps), 6.0 * n);
  frugal::bench::print_bandwidth(" bf16_to_f32", frugal::bench::best_seconds([&] { k::bf16_to_f32(y.data(), b.data(), n); }, reps),
                                 6.0 * n);
  std::printf("\n");
}

// A bf16 linear's output gradient (N,OC) on every linear of a preset's step: rounded, then its
// bias gradient summed in a pass of its own (f32_to_bf16 + matmul_backward's dbias), against the
// one pass of f32_to_bf16_bias_grad. Prints the milliseconds of a step for each.
void bench_output_gradients(int reps) {
  std::printf("output gradient rounding + bias gradient, ms per step:\n");
  for (const auto& preset : frugal::bench::kPresets) {
    const int N = preset.rows(), C = preset.C;
    double two_passes = 0, one_pass = 0;
    for (const int OC : {3 * C, C, 4 * C, C}) {  // qkv, attention projection, fc, fc_proj
      const auto dout = frugal::bench::random_floats(size_t(N) * OC, 4);
      std::vector<k::bf16> out(dout.size());
      std::vector<float> dbias(OC, 0.0f);
      const std::vector<double> s = frugal::bench::interleaved_median_seconds(
          {[&] {
             k::f32_to_bf16(out.data(), dout.data(), dout.size());
             k::matmul_backward(nullptr, nullptr, dbias.data(), dout.data(), nullptr, nullptr, N, 0, OC, false);
           },
           [&] { k::f32_to_bf16_bias_grad(out.data(), dbias.data(), dout.data(), N, OC); }},
          reps);
      two_passes += 1e3 * s[0] * preset.layers, one_pass += 1e3 * s[1] * preset.layers;
    }
    std::printf("  %s (N=%d): two passes %.2f  one pass %.2f\n", preset.name, N, two_passes, one_pass);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv, 9);
  std::printf("bf16 GEMMs: %s\n", k::bf16_matmul_path().c_str());
  bench_conversions(reps);
  bench_output_gradients(reps);
  const char* paths[] = {"fp32 sgemm", "bf16", "bf16 A plain"};
  std::printf("%-21s %5s %5s %5s %11s %11s %13s  (GFLOP/s)\n", "shape", "M", "N", "K", paths[0], paths[1], paths[2]);
  for (const auto& preset : frugal::bench::kPresets) {
    std::vector<double> step_ms(3, 0.0);
    for (const frugal::bench::GemmShape& s : frugal::bench::step_gemm_shapes(preset)) {
      const auto a = frugal::bench::random_floats(size_t(s.M) * s.K, 1), b = frugal::bench::random_floats(size_t(s.K) * s.N, 2);
      const auto ab = rounded(a), bb = rounded(b);
      std::vector<float> c(size_t(s.M) * s.N, 0.0f);
      const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
      std::vector<std::function<void()>> calls = {
          [&] { cpu::sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N); },
          [&] {
            cpu::gemm_bf16(s.trans_a, s.trans_b, s.M, s.N, s.K, ab.data(), lda, bb.data(), ldb, s.beta != 0, c.data(),
                           s.N);
          },
      };
      if (s.trans_a)
        calls.push_back([&] {
          cpu::gemm_bf16(false, s.trans_b, s.M, s.N, s.K, ab.data(), s.K, bb.data(), ldb, s.beta != 0, c.data(), s.N);
        });
      frugal::bench::print_gemm_row(preset.name, s, frugal::bench::interleaved_median_seconds(calls, reps), step_ms);
    }
    std::printf("%s: GEMM ms per training step  %s %.1f  %s %.1f\n", preset.name, paths[0], step_ms[0], paths[1],
                step_ms[1]);
  }
  return 0;
}
