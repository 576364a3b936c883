// AVX-512F instantiation of the fused attention: 16-lane zmm vectors with mask registers,
// an 8 x 32 micro-kernel (16 zmm accumulators), 8-column remainders with the AVX2 traits.
// Called only after a run-time CPU check. The standard and project headers are included before the
// target pragma, so their inline functions stay plain x86-64-v3 code; attention_tiles.h has
// internal linkage only, so nothing compiled here can be picked by the linker for other code.
// simd_math.h comes first: it includes <immintrin.h> with GCC 12's false AVX-512 warnings off.
#include "frugal/kernels/cpu/simd_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/attention.h"

#pragma GCC target("avx512f")
#include "frugal/kernels/cpu/attention_tiles.h"
#include "frugal/kernels/cpu/simd_avx512.h"

namespace frugal::kernels::attention_detail {
namespace {

struct Avx512 : cpu::Avx512Ops {
  using mask = __mmask16;
  using Narrow = Avx2;
  static constexpr int kMR = 8;
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg exp(reg x) { return cpu::exp512(x); }
  static mask gt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static mask from_bits(uint64_t bits) { return static_cast<mask>(bits); }
  static reg select(mask m, reg a, reg b) { return _mm512_mask_blend_ps(m, b, a); }
  static reg keep(mask m, reg x) { return _mm512_maskz_mov_ps(m, x); }
};

}  // namespace

const IsaKernels& avx512_kernels() {
  static const IsaKernels k{&forward<Avx512>, &backward<Avx512>};
  return k;
}

}  // namespace frugal::kernels::attention_detail
