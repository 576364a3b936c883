// Attention of one new query row against the key/value cache (AVX2/FMA, OpenMP over heads when
// the cache is large enough to pay for the threads). The pattern's keys for the query's position
// are listed once; per head: scores q·k_j for every listed position (8-wide dot products), a
// stable softmax with the vectorised exp of simd_math.h, then the weighted sum of the value rows,
// one 8-column slice of the head at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/kernels/cpu/attention.h"

namespace frugal::kernels::cpu {
namespace {

// Below this many visible cached floats (n * C) one thread does all heads: forking costs more.
constexpr long kParallelMinFloats = 1 << 15;

// The positions j < t that query position t - 1 attends to, ascending.
std::vector<int> visible_keys(int t, const AttentionPattern& pattern) {
  std::vector<int> keys;
  keys.reserve(t);
  for (int k0 = 0; k0 < t; k0 += 64)
    for (uint64_t bits = pattern.keys_of(t - 1, k0, std::min(64, t - k0)); bits; bits &= bits - 1)
      keys.push_back(k0 + __builtin_ctzll(bits));
  return keys;
}

// out (HS) for one head; q (HS), rows of k and v at k + keys[j]*C, v + keys[j]*C for j < n (the
// visible positions); s (n) scratch.
void decode_head(float* out, const float* q, const float* k, const float* v, const int* keys,
                 int n, int C, int HS, float scale, float* s) {
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float* kj = k + static_cast<size_t>(keys[j]) * C;
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < HS; d += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kj + d), acc);
    s[j] = hsum256(acc) * scale;
    mx = std::max(mx, s[j]);
  }
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
    _mm256_storeu_ps(s + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum256(vsum);
  for (; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (int d = 0; d < HS; d += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; ++i)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(s[i]), _mm256_loadu_ps(v + size_t(keys[i]) * C + d),
                            acc);
    _mm256_storeu_ps(out + d, _mm256_mul_ps(acc, inv));
  }
}

}  // namespace

void attention_decode_avx2(float* out, const float* q, const float* k_cache, const float* v_cache,
                           int t, int C, int NH, const AttentionPattern& pattern) {
  FRUGAL_CHECK(t >= 1 && NH > 0 && C % NH == 0 && (C / NH) % 8 == 0,
               "attention_decode: need t >= 1 and a head size C/NH that is a multiple of 8 (got t={} "
               "C={} NH={}); fix the model config", t, C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const std::vector<int> keys = visible_keys(t, pattern);
  const int n = static_cast<int>(keys.size());
#pragma omp parallel if (static_cast<long>(n) * C >= kParallelMinFloats)
  {
    std::vector<float> scores(n);
#pragma omp for schedule(static)
    for (int h = 0; h < NH; ++h)
      decode_head(out + h * HS, q + h * HS, k_cache + h * HS, v_cache + h * HS, keys.data(), n, C,
                  HS, scale, scores.data());
  }
}

}  // namespace frugal::kernels::cpu
