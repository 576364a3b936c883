// AVX-512F instantiation of the 2:4 micro-kernel: 4 rows × 6 vectors of 16 (24 accumulators),
// and the 16x16-block transpose the product driver uses around it. Only this file is compiled for
// AVX-512; it is called only after a run-time CPU check, and it defines nothing but these two
// (no shared inline code that could leak AVX-512 elsewhere: the standard headers come before the
// target pragma, and the micro-kernel header's code is templates over this file's internal traits
// or in an unnamed namespace).
#include <cstddef>
#include <cstdint>
#include <utility>

#pragma GCC target("avx512f")
// GCC 12's AVX-512 unpack and shuffle intrinsics pass an undefined vector to their builtins, which
// -Wuninitialized reports at every inlined call (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "frugal/kernels/cpu/simd_avx512.h"
#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels::sparse24_detail {
namespace {

using Avx512 = cpu::Avx512Ops;

constexpr int kVectors = 6;

// Transposes the 16x16 block in r in place (r[c] becomes column c), in four shuffle stages of 16.
void transpose16x16(__m512* r) {
  __m512 t[16], u[16];
  // t: per 128-bit lane, rows 2i and 2i+1 interleaved (lo: elements 0, 1; hi: elements 2, 3)
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + j]: lane L holds element 4L + j of rows 4g..4g+3
  for (int g = 0; g < 4; ++g)
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[4 * g + h]), b = _mm512_castps_pd(t[4 * g + 2 + h]);
      u[4 * g + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      u[4 * g + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // column 4L + j gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j]
  for (int j = 0; j < 4; ++j) {
    const __m512 lo01 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);       // A0 A1 B0 B1
    const __m512 hi01 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);       // A2 A3 B2 B3
    const __m512 lo23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);  // C0 C1 D0 D1
    const __m512 hi23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);  // C2 C3 D2 D3
    r[j] = _mm512_shuffle_f32x4(lo01, lo23, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(lo01, lo23, 0xDD);
    r[8 + j] = _mm512_shuffle_f32x4(hi01, hi23, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(hi01, hi23, 0xDD);
  }
}

}  // namespace

const IsaKernel& avx512_kernel() {
  static const IsaKernel k{&general_chunk_kernel<Avx512, kVectors>,
                          &class_chunk_kernel<Avx512, kVectors>,
                          &transpose_whole_blocks<Avx512, transpose16x16>, 16};
  return k;
}

}  // namespace frugal::kernels::sparse24_detail
