// Benchmark of the fused attention kernels: GFLOP/s of forward and backward (fp32, and on bf16
// operands: attention_forward_bf16, attention_backward_bf16), first on the attention shapes of
// `frugal bench`'s presets (bench/step_shapes.h: S, M, L) with the bf16 speed-ups over fp32 and the milliseconds
// a training step spends in attention, then on other model shapes, for each instruction set the
// CPU has (AVX2, AVX-512: vdpbf16ps where it has AVX512_BF16), next to the SGEMM rate of frugal's
// dense GEMM library (kernels/cpu/gemm.h: oneDNN by default, FRUGAL_GEMM=openblas) measured in the
// same run; then the sparse patterns of Mixed Sparsity Training (Local w=16, Strided w=s=16) at T=128
// and 1024, and an encoder's Bidirectional (twice the pairs), with their wall-time ratio to Causal
// at the same shape; then one decoding step (attention_decode) against caches of 256 and 1024
// positions.
// FLOPs counted (useful work only; partial tiles compute some masked scores besides):
//   scores per head = pattern.pairs(T) (Causal: T(T+1)/2); each costs 2·HS per matrix product.
//   forward  = 2 products (Q·Kᵀ, P·V)                                = 4·B·NH·HS·pairs(T)
//   backward = 5 products (Q·Kᵀ recomputed, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K)
//                                                                     = 10·B·NH·HS·pairs(T)
//   forward and backward bf16 (the same products on bf16 operands) = the fp32 ones' counts
// Each rate is a median wall-clock time over `reps` rounds that run the calls it is compared with
// in turn (fp32 and bf16; and a pattern and Causal at the same shape), so that a ratio compares calls
// that saw the same machine load. Where attention_bf16_operands is false (T ≤ 64, Strided) the bf16
// forward runs the fp32 kernel and rounds its output; the row says so.
// Usage: bench_attention [threads=2] [reps=20]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/bench/step_shapes.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/cpu/attention.h"
#include "frugal/kernels/ops.h"

namespace {

using frugal::bench::interleaved_median_seconds;
using frugal::bench::print;
using frugal::bench::random_floats;

struct Seconds {
  double forward, forward_bf16, backward, backward_bf16;
};

// Times forward and backward under `pattern` (fp32 and bf16, interleaved), and Causal at the same
// shape in the same rounds when `against_causal`; prints the rates and the ratios.
Seconds bench_attention(int B, int T, int C, int NH, int reps,
                        const frugal::kernels::AttentionPattern& pattern = {}, bool against_causal = false) {
  namespace k = frugal::kernels;
  const size_t n = static_cast<size_t>(B) * T * C, rows = static_cast<size_t>(B) * NH * T;
  const std::vector<float> qkv = random_floats(3 * n, 0), dout = random_floats(n, 1);
  std::vector<float> out(n), lse(rows), dqkv(3 * n), causal_out(n), causal_lse(rows);
  std::vector<k::bf16> out16(n);
  std::vector<float> qkv16 = qkv;  // rounded in place by the first bf16 call
  const k::AttentionPattern causal;
  const double fwd_flops = 4.0 * B * NH * (C / NH) * double(pattern.pairs(T));
  std::printf("attention %-6s %-18s B=%d T=%d C=%d NH=%d HS=%d:", k::isa_name(k::attention_active_isa()),
              pattern.name().c_str(), B, T, C, NH, C / NH);
  std::vector<std::function<void()>> forwards = {
      [&] { k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, pattern); },
      [&] { k::attention_forward_bf16(out.data(), out16.data(), lse.data(), qkv16.data(), B, T, C, NH, pattern); }};
  if (against_causal)
    forwards.push_back(
        [&] { k::attention_forward(causal_out.data(), causal_lse.data(), qkv.data(), B, T, C, NH, causal); });
  const std::vector<double> f = interleaved_median_seconds(forwards, reps);
  std::vector<std::function<void()>> backwards = {
      [&] {
        k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, pattern);
      },
      [&] {
        k::attention_backward_bf16(dqkv.data(), dout.data(), qkv16.data(), out.data(), lse.data(), B, T, C, NH,
                                   pattern);
      }};
  if (against_causal)
    backwards.push_back([&] {
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), causal_out.data(), causal_lse.data(), B, T, C, NH,
                            causal);
    });
  const std::vector<double> b = interleaved_median_seconds(backwards, reps);
  const Seconds s{f[0], f[1], b[0], b[1]};
  const char* operands = k::attention_bf16_operands(pattern, T) ? "" : " (fp32 operands)";
  print("forward:", s.forward, fwd_flops);
  print((std::string(" forward bf16") + operands + ":").c_str(), s.forward_bf16, fwd_flops);
  std::printf(" (%.2fx)", s.forward / s.forward_bf16);
  print(" backward:", s.backward, 2.5 * fwd_flops);
  print((std::string(" backward bf16") + operands + ":").c_str(), s.backward_bf16, 2.5 * fwd_flops);
  std::printf(" (%.2fx)", s.backward / s.backward_bf16);
  if (against_causal)
    std::printf("  speed-up over causal: forward %.2fx backward %.2fx", f[2] / s.forward, b[2] / s.backward);
  std::printf("\n");
  return s;
}

// Causal, then Local (w=16), Strided (w=s=16) and Bidirectional at the same shape, each with its
// speed-up over Causal timed in the same rounds.
void bench_patterns(int B, int T, int C, int NH, int reps) {
  using frugal::kernels::AttentionPattern;
  bench_attention(B, T, C, NH, reps);
  for (const AttentionPattern& p : {AttentionPattern::local(16), AttentionPattern::strided(16, 16),
                                 AttentionPattern::bidirectional()})
    bench_attention(B, T, C, NH, reps, p, true);
}

// One decoding step (attention_decode): a query at position t − 1 against t cached keys and values,
// Causal. It reads both caches once: GB/s of 2·t·C·4 bytes (the rate that bounds it), and GFLOP/s
// of 4·t·C (q·Kᵀ and P·V). Best of `reps` calls.
void bench_decode(int t, int C, int NH, int reps) {
  namespace k = frugal::kernels;
  const std::vector<float> q = random_floats(C, 3), keys = random_floats(size_t(t) * C, 4),
                           values = random_floats(size_t(t) * C, 5);
  std::vector<float> out(C);
  const double s = frugal::bench::best_seconds([&] {
    k::attention_decode(out.data(), q.data(), keys.data(), values.data(), t, C, NH, k::AttentionPattern{});
  }, reps);
  std::printf("attention_decode %-6s t=%d C=%d NH=%d: %.1f us = %.1f GB/s of cache, %.1f GFLOP/s\n",
              k::isa_name(k::attention_active_isa()), t, C, NH, s * 1e6, 8.0 * t * C / s / 1e9, 4.0 * t * C / s / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  using frugal::kernels::Isa;
  for (Isa isa : frugal::kernels::available_isas()) {
    frugal::kernels::attention_set_isa(isa);
    for (const frugal::bench::PresetShape& p : frugal::bench::kPresets) {
      std::printf("preset %s: ", p.name);
      const Seconds s = bench_attention(p.B, p.T, p.C, p.heads, reps);
      std::printf("  per step (%d layers): forward fp32 %.2f ms, bf16 %.2f ms; backward fp32 %.2f ms, bf16 %.2f ms\n",
                  p.layers, 1e3 * p.layers * s.forward, 1e3 * p.layers * s.forward_bf16, 1e3 * p.layers * s.backward,
                  1e3 * p.layers * s.backward_bf16);
    }
    bench_attention(12, 64, 128, 4, reps);
    bench_attention(4, 64, 768, 12, reps);
    bench_patterns(16, 128, 384, 6, reps);
    bench_patterns(2, 1024, 384, 6, reps);
    for (const int t : {256, 1024}) {
      bench_decode(t, 192, 4, reps);  // the quickstart's width
      bench_decode(t, 768, 12, reps);
    }
  }
  frugal::kernels::attention_set_isa(Isa::Auto);
  frugal::bench::bench_sgemm(2048, 384, 384, reps);    // the QKV-sized linear of the first shape
  frugal::bench::bench_sgemm(1024, 1024, 1024, reps);  // square, for the peak
}
