// The basic single-precision vector operations of AVX-512F as a traits struct, the counterpart of
// simd_avx2.h. Include it only in a file compiled for AVX-512 (after `#pragma GCC target("avx512f")`),
// which is called only after a run-time CPU check. Internal linkage, as simd_avx2.h.
#pragma once
#include <immintrin.h>

namespace frugal::kernels::cpu {
namespace {

struct Avx512Ops {
  using reg = __m512;
  static constexpr int kLanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
};

}  // namespace
}  // namespace frugal::kernels::cpu
