// The fused attention's forward and backward on bf16 operands (attention_forward_bf16,
// attention_backward_bf16) with AVX512_BF16: the
// Avx512 traits with the bf16 pairs multiplied by vdpbf16ps (16 fp32 lanes, each summing two exact
// bf16 products into its accumulator). Called only after a run-time check of AVX512_BF16
// (attention_avx512.cpp). Headers as in attention_avx512.cpp: standard and project headers before
// the target pragma, the internal-linkage tiles after it.
#include "frugal/kernels/cpu/simd_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/attention.h"

#pragma GCC target("avx512f,avx512bf16")
#include "frugal/kernels/cpu/attention_tiles.h"
#include "frugal/kernels/cpu/attention_avx512_traits.h"

namespace frugal::kernels::attention_detail {
namespace {

struct Avx512Bf16 : Avx512 {
  using pairs = __m512i;  // 16 words of two bf16
  static pairs load_pairs(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static pairs bcast_pair(const uint32_t* p) { return _mm512_set1_epi32(static_cast<int>(*p)); }
  static reg dot_pair(pairs a, pairs b, reg acc) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
};

}  // namespace

ForwardBf16Fn avx512bf16_forward_bf16() { return &forward_bf16<Avx512Bf16>; }
BackwardFn avx512bf16_backward_bf16() { return &backward_bf16<Avx512Bf16>; }

}  // namespace frugal::kernels::attention_detail
