// Benchmark of the fused causal attention kernels: GFLOP/s of forward and backward on the model
// shapes, next to the OpenBLAS SGEMM rate measured in the same run.
// FLOPs counted (causal, useful work only; diagonal tiles compute a few masked scores more):
//   scores per head = T(T+1)/2; each costs 2·HS per matrix product.
//   forward  = 2 products (Q·Kᵀ, P·V)                   = 2·B·NH·HS·T(T+1)
//   backward = 5 products (Q·Kᵀ recompute, dO·Vᵀ, Pᵀ·dO,
//              dSᵀ·Q, dS·K)                             = 5·B·NH·HS·T(T+1)
// Usage: bench_attention [threads=2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/blas_peak.h"
#include "frugal/kernels/ops.h"

namespace {

// Best seconds per call over `reps` timed runs (after one warm-up call).
template <class F>
double best_seconds(F&& call, int reps) {
  call();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    frugal::Timer t;
    call();
    best = std::min(best, t.seconds());
  }
  return best;
}

void bench_shape(int B, int T, int C, int NH) {
  const size_t n = static_cast<size_t>(B) * T * C;
  std::vector<float> qkv(3 * n), out(n), lse(static_cast<size_t>(B) * NH * T), dout(n),
      dqkv(3 * n);
  frugal::Rng rng(7, 0);
  for (auto& x : qkv) x = static_cast<float>(2 * rng.uniform() - 1);
  for (auto& x : dout) x = static_cast<float>(2 * rng.uniform() - 1);
  const int HS = C / NH;
  const double fwd_flops = 2.0 * B * NH * HS * T * (T + 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  const int reps = 20;
  const double tf = best_seconds(
      [&] { frugal::kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH); },
      reps);
  const double tb = best_seconds(
      [&] {
        frugal::kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                            lse.data(), B, T, C, NH);
      },
      reps);
  std::printf("B=%-3d T=%-4d C=%-4d NH=%-3d HS=%-3d  forward %8.3f ms %7.1f GFLOP/s   backward %8.3f ms %7.1f GFLOP/s\n",
              B, T, C, NH, HS, tf * 1e3, fwd_flops / tf * 1e-9, tb * 1e3, bwd_flops / tb * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  frugal::set_num_threads(threads);
  std::printf("threads=%d\n", threads);
  bench_shape(8, 256, 384, 6);
  bench_shape(12, 64, 128, 4);
  bench_shape(4, 64, 768, 12);
  const int sizes[][3] = {{2048, 384, 384}, {1024, 1024, 1024}};
  for (const auto& s : sizes)
    std::printf("OpenBLAS sgemm M=%d N=%d K=%d: %7.1f GFLOP/s\n", s[0], s[1], s[2],
                frugal::kernels::cpu::sgemm_gflops(s[0], s[1], s[2], 10));
}
