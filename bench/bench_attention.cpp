// Benchmark of the fused causal attention kernels: GFLOP/s of forward and backward on the model
// shapes for each instruction set the CPU has (AVX2, AVX-512), next to the SGEMM rate of frugal's
// dense GEMM library (kernels/cpu/gemm.h: oneDNN by default, FRUGAL_GEMM=openblas) measured in the
// same run.
// FLOPs counted (causal, useful work only; diagonal tiles compute some masked scores besides):
//   scores per head = T(T+1)/2; each costs 2·HS per matrix product.
//   forward  = 2 products (Q·Kᵀ, P·V)                                = 2·B·NH·HS·T(T+1)
//   backward = 5 products (Q·Kᵀ recomputed, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K)
//                                                                     = 5·B·NH·HS·T(T+1)
// Each rate is the best wall-clock time of `reps` calls (the machine is shared: the best call is
// the one least disturbed by other processes).
// Usage: bench_attention [threads=2] [reps=20]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/cpu/attention.h"
#include "frugal/kernels/ops.h"

namespace {

using frugal::bench::best_seconds;
using frugal::bench::print;
using frugal::bench::random_floats;

void bench_attention(int B, int T, int C, int NH, int reps) {
  const size_t n = static_cast<size_t>(B) * T * C;
  const std::vector<float> qkv = random_floats(3 * n, 0), dout = random_floats(n, 1);
  std::vector<float> out(n), lse(static_cast<size_t>(B) * NH * T), dqkv(3 * n);
  const double fwd_flops = 2.0 * B * NH * (C / NH) * T * (T + 1.0);
  std::printf("attention %-6s B=%d T=%d C=%d NH=%d HS=%d:",
              frugal::kernels::attention_isa_name(frugal::kernels::attention_active_isa()), B, T,
              C, NH, C / NH);
  print("forward:", best_seconds([&] {
    frugal::kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  }, reps), fwd_flops);
  print(" backward:", best_seconds([&] {
    frugal::kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                        lse.data(), B, T, C, NH);
  }, reps), 2.5 * fwd_flops);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  frugal::set_num_threads(threads);
  std::printf("threads=%d reps=%d\n", threads, reps);
  using frugal::kernels::AttentionIsa;
  std::vector<AttentionIsa> isas = {AttentionIsa::Avx2};
  if (__builtin_cpu_supports("avx512f")) isas.push_back(AttentionIsa::Avx512);
  for (AttentionIsa isa : isas) {
    frugal::kernels::attention_set_isa(isa);
    bench_attention(8, 256, 384, 6, reps);
    bench_attention(12, 64, 128, 4, reps);
    bench_attention(4, 64, 768, 12, reps);
  }
  frugal::kernels::attention_set_isa(AttentionIsa::Auto);
  frugal::bench::bench_sgemm(2048, 384, 384, reps);    // the QKV-sized linear of the first shape
  frugal::bench::bench_sgemm(1024, 1024, 1024, reps);  // square, for the peak
}
