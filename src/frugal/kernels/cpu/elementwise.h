// The loop the element-wise CPU kernels share (activations, elementwise, adamw): AVX2 over 8
// floats, masked loads and stores for the tail only, OpenMP over blocks.
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

// The lanes of one 8-float group that a kernel reads and writes: all 8 (plain loads and stores)
// or, in the last group of a length that is not a multiple of 8, the first few (masked). Only the
// tail is masked: AMD's masked stores (vmaskmovps) are microcoded, several times slower than
// plain ones, and made the element-wise kernels 2-5x slower on Zen 4.
struct AllLanes {};
struct FirstLanes {
  __m256i mask;
};

inline __m256 load(const float* p, AllLanes) { return _mm256_loadu_ps(p); }
inline __m256 load(const float* p, FirstLanes l) { return _mm256_maskload_ps(p, l.mask); }
inline void store(float* p, AllLanes, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store(float* p, FirstLanes l, __m256 v) { _mm256_maskstore_ps(p, l.mask, v); }

// Calls f(i, lanes) for every 8-float group of [0, n), lanes = AllLanes{} or, for a short last
// group, FirstLanes (so f is generic: [&](size_t i, auto lanes) { ... load(p + i, lanes) ... }).
// Groups are split statically over threads, so results do not depend on scheduling.
template <class F>
void for_each8(size_t n, F&& f) {
  const size_t full_groups = n / 8;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t g = 0; g < full_groups; ++g) f(g * 8, AllLanes{});
  if (n % 8 != 0) f(full_groups * 8, FirstLanes{tail_mask(n % 8)});
}

}  // namespace frugal::kernels::cpu
