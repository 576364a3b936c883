// AVX-512F instantiation of the 2:4 micro-kernel: 4 rows × 6 vectors of 16 (24 accumulators).
// Only this file is compiled for AVX-512; it is called only after a run-time CPU check, and it
// defines nothing but the kernel (no shared inline code that could leak AVX-512 elsewhere).
#pragma GCC target("avx512f")
#include <immintrin.h>

#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels::sparse24_detail {
namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int kLanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
};

constexpr int kVectors = 6;

}  // namespace

const IsaKernel& avx512_kernel() {
  static const IsaKernel k{&general_chunk_kernel<Avx512, kVectors>,
                          &class_chunk_kernel<Avx512, kVectors>};
  return k;
}

}  // namespace frugal::kernels::sparse24_detail
