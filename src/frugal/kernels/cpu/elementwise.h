// The loop the element-wise CPU kernels share (activations, elementwise, adamw, layernorm's
// stores): AVX2 over 8 floats, masked loads and stores for the tail only, OpenMP over blocks; and
// the stores of 8 floats rounded to bf16 (the kernels that write bf16 activations).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "frugal/kernels/dtype.h"

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

// The bf16 bits of 8 floats with bits x, given their bits rounded (`rounded`, each <= 0xffff),
// packed: NaN kept, quiet, as the reference keeps it (kernels/ref/bf16_ref.h).
inline __m128i pack_bf16(__m256i x, __m256i rounded) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // each lane <= 0xffff: packus keeps it
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// 8 floats rounded to bf16, to nearest with ties to even, NaN kept quiet: the reference's rounding
// (kernels/ref/bf16_ref.h) bit for bit, in AVX2 integer operations (the AVX512_BF16 instruction
// flushes subnormals, so it would not match).
inline __m128i round_bf16(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return pack_bf16(x, _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16));
}

// bf16_rounding::hash32 of 8 lanes.
inline __m256i hash32(__m256i x) {
  x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 16)), _mm256_set1_epi32(0x7feb352d));
  x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), _mm256_set1_epi32(int(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// 8 floats rounded to bf16 stochastically (kernels/bf16_rounding.h): the elements with lower index
// bits `low` of the span with `key`, the reference's bits.
inline __m128i round_bf16_stochastic(__m256 v, __m256i low, __m256i key) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i r =
      _mm256_srli_epi32(hash32(_mm256_xor_si256(hash32(_mm256_xor_si256(low, key)), _mm256_srli_epi32(x, 16))), 16);
  return pack_bf16(x, _mm256_srli_epi32(_mm256_add_epi32(x, r), 16));
}

// Stores 8 bf16 values (rounded: the lanes of an __m128i) or 8 floats rounded to nearest.
inline void store(bf16* p, AllLanes, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }
inline void store(bf16* p, FirstLanes l, __m128i h) {
  alignas(16) bf16 lanes[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), h);
  const int n = __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(l.mask)));
  std::memcpy(p, lanes, sizeof(bf16) * n);
}
inline void store(bf16* p, AllLanes l, __m256 v) { store(p, l, round_bf16(v)); }
inline void store(bf16* p, FirstLanes l, __m256 v) { store(p, l, round_bf16(v)); }

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

// Calls f(i, lanes), which returns the 8 values of group i, for every 8-float group of [0, n) and
// stores them at out + i (lanes as in for_each8). A bf16 output goes through a tile of floats in
// L1 that is rounded once it is full: rounding each group as it is computed leaves a kernel's long
// chains (GELU's division) and the rounding's dozen integer operations competing for the
// scheduler, and GELU took 1.65x its fp32 time where the tile takes 1.2x (Zen 4). The values and
// their rounding are the same either way.
template <class F>
void for_each8_store(float* out, size_t n, F&& f) {
  for_each8(n, [&](size_t i, auto lanes) { store(out + i, lanes, f(i, lanes)); });
}
template <class F>
void for_each8_store(bf16* out, size_t n, F&& f) {
  constexpr size_t kTile = 256;  // floats: 1 KiB
  const size_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t t = 0; t < tiles; ++t) {
    alignas(32) float tile[kTile];
    const size_t begin = t * kTile, end = std::min(n, begin + kTile), full = begin + (end - begin) / 8 * 8;
    for (size_t i = begin; i < full; i += 8) _mm256_store_ps(tile + (i - begin), f(i, AllLanes{}));
    for (size_t i = begin; i < full; i += 8) store(out + i, AllLanes{}, _mm256_load_ps(tile + (i - begin)));
    if (full < end) {
      const FirstLanes lanes{tail_mask(end - full)};
      store(out + full, lanes, f(full, lanes));
    }
  }
}

}  // namespace frugal::kernels::cpu
