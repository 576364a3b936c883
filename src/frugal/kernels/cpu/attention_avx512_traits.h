// Internal to the AVX-512 attention (attention_avx512.cpp, attention_avx512bf16.cpp): the 16-lane
// traits of attention_tiles.h. Include only after `#pragma GCC target("avx512f")` (or a superset)
// and attention_tiles.h; internal linkage, like the tiles.
#pragma once
#include "frugal/kernels/cpu/attention_tiles.h"
#include "frugal/kernels/cpu/simd_avx512.h"

namespace frugal::kernels::attention_detail {
namespace {

// 8 x 32 micro-kernel (16 zmm accumulators), on fp32 and on bf16 pairs widened to fp32 (two FMAs
// per pair, the odd index first, as Avx2's).
struct Avx512 : cpu::Avx512Ops {
  using mask = __mmask16;
  using Narrow = Avx2;
  static constexpr int kMR = 8, kMRPairs = 8;
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg exp(reg x) { return cpu::exp512(x); }
  static mask gt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static mask from_bits(uint64_t bits) { return static_cast<mask>(bits); }
  static reg select(mask m, reg a, reg b) { return _mm512_mask_blend_ps(m, b, a); }
  static reg keep(mask m, reg x) { return _mm512_maskz_mov_ps(m, x); }
  struct pairs {
    reg even, odd;
  };
  static pairs widen(__m512i w) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static pairs load_pairs(const uint32_t* p) { return widen(_mm512_loadu_si512(p)); }
  static pairs bcast_pair(const uint32_t* p) { return widen(_mm512_set1_epi32(static_cast<int>(*p))); }
  static reg dot_pair(pairs a, pairs b, reg acc) { return fma(a.even, b.even, fma(a.odd, b.odd, acc)); }
  // The bf16 rounding and pair words of Avx2's, 16 lanes.
  using ireg = __m512i;
  static ireg round_high(reg v) {
    const __m512i x = _mm512_castps_si512(v), high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), high);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_and_si512(x, high), _mm512_set1_epi32(0x400000));
    return _mm512_mask_blend_epi32(nan, r, quiet);
  }
  static ireg pair(ireg lo, ireg hi) { return _mm512_or_si512(_mm512_srli_epi32(lo, 16), hi); }
  static reg as_reg(ireg x) { return _mm512_castsi512_ps(x); }
  static void store_words(uint32_t* p, ireg w) { _mm512_storeu_si512(p, w); }
  static void store_bf16(uint32_t* p, ireg r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
};

}  // namespace
}  // namespace frugal::kernels::attention_detail
