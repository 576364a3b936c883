// Benchmark of the fused causal attention kernels: GFLOP/s of forward and backward on the model
// shapes, next to the OpenBLAS SGEMM rate measured in the same run.
// FLOPs counted (causal, useful work only; diagonal tiles compute some masked scores besides):
//   scores per head = T(T+1)/2; each costs 2·HS per matrix product.
//   forward  = 2 products (Q·Kᵀ, P·V)                                = 2·B·NH·HS·T(T+1)
//   backward = 5 products (Q·Kᵀ recomputed, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K) = 5·B·NH·HS·T(T+1)
// Each rate is the best of `reps` timed calls: wall-clock GFLOP/s, and GFLOP per CPU-second of the
// whole process (robust on a shared machine; times the thread count it bounds the wall rate).
// Usage: bench_attention [threads=2] [reps=20]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/blas_peak.h"
#include "frugal/kernels/ops.h"

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

struct Rate {
  double ms, wall_gflops, cpu_gflops;
};

// Best wall and best CPU time over `reps` calls (after one warm-up call), as rates for `flops`.
template <class F>
Rate measure(F&& call, double flops, int reps) {
  call();
  double wall = 1e30, cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    frugal::Timer t;
    call();
    wall = std::min(wall, t.seconds());
    cpu = std::min(cpu, cpu_seconds() - c0);
  }
  return {wall * 1e3, flops / wall * 1e-9, flops / cpu * 1e-9};
}

void print(const char* what, const Rate& r) {
  std::printf("  %s %.3f ms = %.1f GFLOP/s (%.1f GFLOP/cpu-s)", what, r.ms, r.wall_gflops,
              r.cpu_gflops);
}

std::vector<float> random_floats(size_t n, uint64_t stream) {
  frugal::Rng rng(7, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2 * rng.uniform() - 1);
  return v;
}

void bench_attention(int B, int T, int C, int NH, int reps) {
  const size_t n = static_cast<size_t>(B) * T * C;
  const std::vector<float> qkv = random_floats(3 * n, 0), dout = random_floats(n, 1);
  std::vector<float> out(n), lse(static_cast<size_t>(B) * NH * T), dqkv(3 * n);
  const double fwd_flops = 2.0 * B * NH * (C / NH) * T * (T + 1.0);
  std::printf("attention B=%d T=%d C=%d NH=%d HS=%d:", B, T, C, NH, C / NH);
  print("forward:", measure([&] {
    frugal::kernels::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  }, fwd_flops, reps));
  print(" backward:", measure([&] {
    frugal::kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                        lse.data(), B, T, C, NH);
  }, 2.5 * fwd_flops, reps));
  std::printf("\n");
}

void bench_sgemm(int M, int N, int K, int reps) {
  const std::vector<float> a = random_floats(static_cast<size_t>(M) * K, 2),
                           b = random_floats(static_cast<size_t>(K) * N, 3);
  std::vector<float> c(static_cast<size_t>(M) * N);
  std::printf("OpenBLAS sgemm M=%d N=%d K=%d:", M, N, K);
  print("", measure([&] {
    frugal::kernels::cpu::reference_sgemm(M, N, K, a.data(), b.data(), c.data());
  }, 2.0 * M * N * K, reps));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  frugal::set_num_threads(threads);
  std::printf("threads=%d reps=%d\n", threads, reps);
  bench_attention(8, 256, 384, 6, reps);
  bench_attention(12, 64, 128, 4, reps);
  bench_attention(4, 64, 768, 12, reps);
  bench_sgemm(2048, 384, 384, reps);    // the QKV-sized linear of the first shape
  bench_sgemm(1024, 1024, 1024, reps);  // square, for the peak
}
