// The engine SGEMM for benchmarks and the measured GEMM peak (see blas_peak.h).
#include "frugal/kernels/cpu/blas_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <numeric>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/cpu/isa.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels::cpu {

using bf16_t = kernels::bf16;

void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
  cpu::sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}

double measure_gemm_peak_flops(bool bf16) {
  // A square shape large enough for the BLAS to reach steady state (a linear forward with
  // N = C = OC = 1536), through the optimised dense linear whatever path the kernels take
  // (FRUGAL_ISA=ref's naive one would measure nothing of the machine).
  const int n = 1536;
  const bool native_bf16 = bf16 && kernels::bf16_matmul_native();
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  std::vector<bf16_t> a16(native_bf16 ? a.size() : 0, bf16_t(0x3f00)), b16(native_bf16 ? b.size() : 0, bf16_t(0x3e80));
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    Timer t;
    if (native_bf16)
      cpu::matmul_bf16_forward(c.data(), a16.data(), b16.data(), nullptr, n, n, n);
    else
      cpu::matmul_avx2.forward(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::min(best, t.seconds());
  }
  return 2.0 * n * double(n) * n / best;
}

namespace {

// `iterations` rounds of one FMA on each of `kChains` independent accumulators (enough chains to
// cover the FMA latency times the units that issue them); returns their sum so that the loop is
// not optimised away. FLOPs: iterations · kChains · lanes · 2.
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iterations) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iterations) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

// Two multiply-adds of bf16 pairs per fp32 lane per vdpbf16ps. FLOPs: iterations · kChains · 16 · 4.
// GCC 12's _mm512_reduce_add_ps passes an undefined vector to its builtins, which -Wuninitialized
// reports (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(int64_t iterations) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f7f), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_reduce_add_ps(acc[0]);
}
#pragma GCC diagnostic pop

bool has_avx512() { return max_isa() == Isa::Avx512; }
bool has_avx512_bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

const char* fma_peak_isa(bool bf16) {
  if (bf16 && has_avx512_bf16()) return "AVX512_BF16";
  return has_avx512() ? "AVX-512" : "AVX2";
}

double measure_fma_peak_flops(bool bf16) {
  const bool dpbf16 = bf16 && has_avx512_bf16(), avx512 = has_avx512();
  const int lanes = avx512 ? 16 : 8;
  const int64_t iterations = int64_t{1} << 21;  // ~10 ms per thread at a few GHz
  const double flops_per_loop = (dpbf16 ? 4.0 : 2.0) * lanes * kChains * double(iterations);
  // Each thread times its own loops in its CPU time, so time spent descheduled (a core shared with
  // other work) does not count: the sum of the threads' best rates is what they reach with a core
  // each, the ceiling a GEMM on the same threads can approach, whatever else the machine runs.
  std::vector<double> best_rate(omp_get_max_threads(), 0.0);
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
#pragma omp parallel
    {
      const double start = thread_cpu_seconds();
      const float v = dpbf16   ? dpbf16_chains(iterations)
                      : avx512 ? fma_chains_avx512(iterations)
                               : fma_chains_avx2(iterations);
      const double rate = flops_per_loop / (thread_cpu_seconds() - start);
      double& best = best_rate[omp_get_thread_num()];
      best = std::max(best, rate);
#pragma omp critical
      sink = sink + v;
    }
  }
  return std::accumulate(best_rate.begin(), best_rate.end(), 0.0);
}

}  // namespace frugal::kernels::cpu
