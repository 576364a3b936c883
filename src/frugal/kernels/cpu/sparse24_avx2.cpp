// AVX2/FMA instantiation of the 2:4 micro-kernel: 4 rows × 3 vectors of 8 (12 accumulators),
// covering the 96-column panel in 4 strips; and the 8x8-block transpose.
#include <immintrin.h>

#include "frugal/kernels/cpu/simd_avx2.h"
#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels::sparse24_detail {
namespace {

using Avx2 = cpu::Avx2Ops;

constexpr int kVectors = 3;

// Transposes the 8x8 block in v in place (v[c] becomes column c), in three shuffle stages of 8.
void transpose8x8(__m256* v) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * i + h], b = t[4 * i + 2 + h];
      u[4 * i + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    v[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

}  // namespace

const IsaKernel& avx2_kernel() {
  static const IsaKernel k{&general_chunk_kernel<Avx2, kVectors>,
                          &class_chunk_kernel<Avx2, kVectors>,
                          &transpose_whole_blocks<Avx2, transpose8x8>, 8};
  return k;
}

}  // namespace frugal::kernels::sparse24_detail
