// The elementwise CPU kernels (residual add, scaling, dropout, sum of squares): the shared
// element-wise loop (cpu/elementwise.h) or, for dropout and the sum of squares, their own
// OpenMP loops.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/elementwise.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  FRUGAL_PROFILE("residual");
  for_each8(n, [&](size_t i, auto m) { store(out + i, m, _mm256_add_ps(load(a + i, m), load(b + i, m))); });
}

void scale_inplace(float* x, size_t n, float s) {
  FRUGAL_PROFILE("scale");
  const __m256 vs = _mm256_set1_ps(s);
  for_each8(n, [&](size_t i, auto m) { store(x + i, m, _mm256_mul_ps(load(x + i, m), vs)); });
}

void dropout_apply(float* x, size_t n, float p, uint64_t key, size_t first) {
  FRUGAL_PROFILE("dropout");
  if (p <= 0.0f) return;
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) x[i] = uniform_at(key, first + i) < p ? 0.0f : x[i] * keep_scale;
}

constexpr size_t kSquaresChunk = 4096;

// acc + the squares of x[0, n) in the 8 lanes, n rounded down to a multiple of 8.
__m256 add_squares(__m256 acc, const float* x, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  return acc;
}

// Feeds x[0, n) into the stream's current chunk (n <= what the chunk still takes); adds the chunk
// to the total when it is complete.
void feed_chunk(SumSquaresStream& s, const float* x, size_t n) {
  const size_t groups = n / 8 * 8;
  _mm256_storeu_ps(s.lanes, add_squares(_mm256_loadu_ps(s.lanes), x, groups));
  s.tail_count = static_cast<int>(n - groups);
  std::copy(x + groups, x + n, s.tail);
  s.filled += n;
  if (s.filled == kSquaresChunk) {
    s.total += hsum256(_mm256_loadu_ps(s.lanes));
    s = {s.total};
  }
}

void sum_squares_feed(SumSquaresStream& s, const float* x, size_t n) {
  FRUGAL_CHECK(s.tail_count == 0, "internal: sum_squares_feed after a piece that was not a multiple of 8 floats");
  FRUGAL_PROFILE("grad norm");
  size_t done = 0;
  if (s.filled > 0) {  // finish the chunk an earlier piece began
    done = std::min(n, kSquaresChunk - s.filled);
    feed_chunk(s, x, done);
  }
  // Whole chunks in parallel, their sums added in order: the result is the same for any thread
  // count.
  const size_t chunks = (n - done) / kSquaresChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n - done >= kParallelMin)
  for (size_t c = 0; c < chunks; ++c)
    partial[c] = hsum256(add_squares(_mm256_setzero_ps(), x + done + c * kSquaresChunk, kSquaresChunk));
  for (double p : partial) s.total += p;
  done += chunks * kSquaresChunk;
  if (done < n) feed_chunk(s, x + done, n - done);
}

double sum_squares_finish(const SumSquaresStream& s) {
  if (s.filled == 0) return s.total;
  double chunk = hsum256(_mm256_loadu_ps(s.lanes));
  for (int i = 0; i < s.tail_count; ++i) chunk += static_cast<double>(s.tail[i]) * s.tail[i];
  return s.total + chunk;
}

}  // namespace

const ElementwiseKernels elementwise_avx2{&residual_forward, &dropout_apply, &sum_squares_feed,
                                          &sum_squares_finish, &scale_inplace};

}  // namespace frugal::kernels::cpu
