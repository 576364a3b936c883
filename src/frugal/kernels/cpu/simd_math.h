// AVX2/FMA vector math shared by the CPU kernels: exp, tanh, GELU (tanh form) and SiLU on 8 floats,
// and an AVX-512 twin of exp on 16 floats (target attribute: call it only from code that runs
// after a run-time AVX-512F check). exp uses a range reduction to [-ln2/2, ln2/2] and a degree-6
// polynomial (max rel. error ~2e-7); both widths give bit-identical lanes.
#pragma once
// GCC 12 reports the self-initialised _mm512_undefined_ps() inside several AVX-512 intrinsics as
// "(maybe) used uninitialized" (a false positive, fixed in later GCC). The state is looked up at
// the intrinsic header's lines, so it is silenced around the header's first inclusion: include
// this file before anything else that includes <immintrin.h> in code that calls exp512.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace frugal::kernels::cpu {

inline __m256 exp256(__m256 x) {
  const __m256 max_x = _mm256_set1_ps(88.3762626647949f);
  const __m256 min_x = _mm256_set1_ps(-87.3365447505531f);
  x = _mm256_max_ps(_mm256_min_ps(x, max_x), min_x);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n*ln2, with ln2 split in two parts for accuracy
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// exp256 on 16 lanes, the same operations in the same order.
__attribute__((target("avx512f"))) inline __m512 exp512(__m512 x) {
  const __m512 max_x = _mm512_set1_ps(88.3762626647949f);
  const __m512 min_x = _mm512_set1_ps(-87.3365447505531f);
  x = _mm512_max_ps(_mm512_min_ps(x, max_x), min_x);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); saturates correctly at both ends.
inline __m256 tanh256(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp256(_mm256_add_ps(u, u));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluA = 0.044715f;

// gelu(x) and, when want_grad, gelu'(x) (tanh form).
inline __m256 gelu256(__m256 x, __m256* grad) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluA), x2), x, x);
  const __m256 th = tanh256(_mm256_mul_ps(_mm256_set1_ps(kGeluK), inner));
  if (grad) {
    const __m256 sech2 = _mm256_fnmadd_ps(th, th, one);
    const __m256 dinner = _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluA), x2, one);
    const __m256 t2 = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_mul_ps(sech2, _mm256_mul_ps(_mm256_set1_ps(kGeluK), dinner)));
    *grad = _mm256_fmadd_ps(half, _mm256_add_ps(one, th), t2);
  }
  return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, th));
}

// silu(x) = x * sigmoid(x) and, when wanted, silu'(x) = s (1 + x (1 - s)).
inline __m256 silu256(__m256 x, __m256* grad) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
  if (grad) *grad = _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
  return _mm256_mul_ps(x, s);
}

// Horizontal sum of 8 floats.
inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace frugal::kernels::cpu
