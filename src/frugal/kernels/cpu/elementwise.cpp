// The elementwise CPU kernels (residual add, scaling, dropout, sum of squares): the shared
// element-wise loop (cpu/elementwise.h) or, for dropout and the sum of squares, their own
// OpenMP loops.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/profile.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/elementwise.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {

using namespace cpu;

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  FRUGAL_PROFILE("residual");
  for_each8(n, [&](size_t i, __m256i m) { store(out + i, m, _mm256_add_ps(load(a + i, m), load(b + i, m))); });
}

void scale_inplace(float* x, size_t n, float s) {
  FRUGAL_PROFILE("scale");
  const __m256 vs = _mm256_set1_ps(s);
  for_each8(n, [&](size_t i, __m256i m) { store(x + i, m, _mm256_mul_ps(load(x + i, m), vs)); });
}

void dropout_apply(float* x, size_t n, float p, uint64_t key) {
  FRUGAL_PROFILE("dropout");
  if (p <= 0.0f) return;
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) x[i] = uniform_at(key, i) < p ? 0.0f : x[i] * keep_scale;
}

double sum_squares(const float* x, size_t n) {
  FRUGAL_PROFILE("grad norm");
  // Fixed-size chunks summed in float lanes, then combined in double in chunk order: the result
  // is the same for any thread count.
  constexpr size_t kChunk = 4096;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    __m256 acc = _mm256_setzero_ps();
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    double s = hsum256(acc);
    for (; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace frugal::kernels
