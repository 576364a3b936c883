// The loop the element-wise CPU kernels share (activations, elementwise, adamw): AVX2 over 8
// floats, masked loads for the tail, OpenMP over blocks.
#pragma once
#include <immintrin.h>

#include <cstddef>

namespace frugal::kernels::cpu {

// Below this many elements a parallel region costs more than it saves.
constexpr size_t kParallelMin = 1 << 15;

inline __m256i tail_mask(size_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), idx);
}

// Calls f(i, mask) for every 8-float group of [0, n); mask selects the valid lanes of the last
// group. Groups are split statically over threads, so results do not depend on scheduling.
template <class F>
void for_each8(size_t n, F&& f) {
  const size_t groups = (n + 7) / 8;
  const __m256i full = _mm256_set1_epi32(-1);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t g = 0; g < groups; ++g) {
    const size_t i = g * 8;
    f(i, n - i >= 8 ? full : tail_mask(n - i));
  }
}

inline __m256 load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

}  // namespace frugal::kernels::cpu
