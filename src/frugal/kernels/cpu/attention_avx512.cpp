// AVX-512F instantiation of the fused attention: 16-lane zmm vectors with mask registers,
// an 8 x 32 micro-kernel (16 zmm accumulators), 8-column remainders with the AVX2 traits (the
// traits: attention_avx512_traits.h; the forward on bf16 with AVX512_BF16: attention_avx512bf16.cpp).
// Called only after a run-time CPU check. The standard and project headers are included before the
// target pragma, so their inline functions stay plain x86-64-v3 code; attention_tiles.h has
// internal linkage only, so nothing compiled here can be picked by the linker for other code.
// simd_math.h comes first: it includes <immintrin.h> with GCC 12's false AVX-512 warnings off.
#include "frugal/kernels/cpu/simd_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/attention.h"

#pragma GCC target("avx512f")
#include "frugal/kernels/cpu/attention_tiles.h"
#include "frugal/kernels/cpu/attention_avx512_traits.h"

namespace frugal::kernels::attention_detail {

const IsaKernels& avx512_kernels() {
  // the forward and backward on bf16 with vdpbf16ps where the CPU has AVX512_BF16, else on widened pairs
  static const bool dot = __builtin_cpu_supports("avx512bf16");
  static const IsaKernels k{&forward<Avx512>, dot ? avx512bf16_forward_bf16() : &forward_bf16<Avx512>,
                            &backward<Avx512>, dot ? avx512bf16_backward_bf16() : &backward_bf16<Avx512>};
  return k;
}

}  // namespace frugal::kernels::attention_detail
