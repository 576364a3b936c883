// AVX2/FMA instantiation of the 2:4 micro-kernel: 4 rows × 3 vectors of 8 (12 accumulators),
// covering the 96-column panel in 4 strips.
#include <immintrin.h>

#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels::sparse24_detail {
namespace {

struct Avx2 {
  using reg = __m256;
  static constexpr int kLanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
};

constexpr int kVectors = 3;

}  // namespace

const IsaKernel& avx2_kernel() {
  static const IsaKernel k{&general_chunk_kernel<Avx2, kVectors>,
                          &class_chunk_kernel<Avx2, kVectors>, nullptr};
  return k;
}

}  // namespace frugal::kernels::sparse24_detail
