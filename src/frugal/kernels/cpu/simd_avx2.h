// The basic single-precision vector operations of AVX2 + FMA as a traits struct (register type,
// lane count, load/store/broadcast and arithmetic), which the ISA-specific files of the templated
// kernels (sparse24, sparse_linear, attention) use directly or extend with their own operations.
// Internal linkage (unnamed namespace): every file that includes it compiles its own copy, so no
// inline function compiled under another target can be picked by the linker for this one.
#pragma once
#include <immintrin.h>

namespace frugal::kernels::cpu {
namespace {

struct Avx2Ops {
  using reg = __m256;
  static constexpr int kLanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
};

}  // namespace
}  // namespace frugal::kernels::cpu
