// AVX2/FMA instantiation of the unstructured sparse linear inner loops (8 lanes: a 64-token panel
// row is 8 vectors, one accumulator set).
#include <immintrin.h>

#include "frugal/kernels/cpu/simd_avx2.h"
#include "frugal/kernels/cpu/sparse_linear_microkernel.h"

namespace frugal::kernels::sparse_linear_detail {
namespace {

struct Avx2 : cpu::Avx2Ops {
  // out[i] += Σ buf[8i .. 8i+8): two horizontal-add stages, then the 128-bit halves.
  static void reduce_add(const float* buf, float* out) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) v[i] = load(buf + 8 * i);
    const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                                      _mm256_permute2f128_ps(h0123, h4567, 0x31));
    store(out, _mm256_add_ps(load(out), sums));
  }
};

}  // namespace

const IsaKernel& avx2_kernel() {
  static const IsaKernel k{&product_kernel<Avx2, 1>, &dots_kernel<Avx2>};
  return k;
}

}  // namespace frugal::kernels::sparse_linear_detail
