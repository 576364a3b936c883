// AVX-512F instantiation of the unstructured sparse linear inner loops (16 lanes: a 64-token panel
// row is 4 vectors, two accumulator sets). Only this file is compiled for AVX-512; it is called
// only after a run-time CPU check, and it defines nothing but avx512_kernel() (the standard headers
// come before the target pragma; the micro-kernel header's code is templates over this file's
// internal traits or in an unnamed namespace, so no AVX-512 copy of shared code can leak).
#include <cstddef>
#include <cstdint>

#pragma GCC target("avx512f")
// GCC 12's AVX-512 shuffle intrinsics pass an undefined vector to their builtins, which
// -Wuninitialized reports at every inlined call (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "frugal/kernels/cpu/simd_avx512.h"
#include "frugal/kernels/cpu/sparse_linear_microkernel.h"

namespace frugal::kernels::sparse_linear_detail {
namespace {

struct Avx512 : cpu::Avx512Ops {
  // out[i] += Σ buf[16i .. 16i+16), 16 sums in four halving stages (45 instructions instead of 16
  // horizontal sums). Vector m of the stages is buffer row kRow[m]: the stages leave the sum of
  // their vector e + {0, 8, 4, 12}[L] in 128-bit lane L, element e, which this order makes row 4L + e.
  static void reduce_add(const float* buf, float* out) {
    static constexpr int kRow[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    __m512 w[8], y[4];
    for (int i = 0; i < 8; ++i) {  // w[i]: 256-bit halves of vectors i (lanes 0-1) and i+8 (2-3)
      const __m512 a = load(buf + 16 * kRow[i]), b = load(buf + 16 * kRow[i + 8]);
      w[i] = add(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; i < 4; ++i)  // y[i]: 128-bit partials of vectors i, i+8, i+4, i+12
      y[i] = add(_mm512_shuffle_f32x4(w[i], w[i + 4], 0x88), _mm512_shuffle_f32x4(w[i], w[i + 4], 0xDD));
    const __m512 za = add(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
    const __m512 zb = add(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
    const __m512d da = _mm512_castps_pd(za), db = _mm512_castps_pd(zb);
    const __m512 sums = add(_mm512_castpd_ps(_mm512_unpacklo_pd(da, db)),
                            _mm512_castpd_ps(_mm512_unpackhi_pd(da, db)));
    store(out, add(load(out), sums));
  }
};

}  // namespace

const IsaKernel& avx512_kernel() {
  static const IsaKernel k{&product_kernel<Avx512, 2>, &dots_kernel<Avx512>};
  return k;
}

}  // namespace frugal::kernels::sparse_linear_detail
