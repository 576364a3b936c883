// How fp32 weights are rounded into their bf16 working copies (train.bf16_rounding, issue 29):
// to nearest even, or stochastically. The stochastic rounding adds 16 random bits to the float's
// bits and cuts the low 16: it rounds up with probability (cut-off part) / (bf16 step), so
// E[rounded] = x; NaN and the infinities round as to nearest (kernels/ref/bf16_ref.h). The random
// bits are a counter-based hash of (seed, the element's index in the whole model's parameter
// vector, the float's upper 16 bits: the bf16 value at or below it), never a generator's state: a
// copy is the same bits wherever and whenever it is rounded from the same weights (the fused AdamW
// update, a refresh after a checkpoint load or of a frozen weight, a ZeRO shard's gather, every
// instruction set), which a key of the optimizer step would not give a copy rounded at another
// step than its weight's last update. Keyed by the bf16 interval and not the whole float, an
// element's threshold stays while its weight moves within the interval: a change of the weight
// flips the copy with probability (change) / (bf16 step), so the copy follows the weight in
// expectation, and a change of an ulp (another summation order) flips it as rarely as the nearest
// rounding. The scalar pieces here are the definition the reference and the vectorised kernels
// (cpu/bf16_convert.h, cpu/elementwise.h) share.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "frugal/core/rng.h"

namespace frugal::kernels {

struct Bf16Rounding {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t first = 0;  // the index in the whole model's parameter vector of element 0
  // The rounding of the elements from `offset` on.
  Bf16Rounding from(size_t offset) const { return {stochastic, seed, first + offset}; }
  bool operator==(const Bf16Rounding&) const = default;
};

namespace bf16_rounding {

// A 32-bit integer hash (Chris Wellons' lowbias32): multiplies and shifts every vector unit has.
constexpr uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// The key of the elements whose index has `high` as its upper 32 bits.
inline uint32_t span_key(uint64_t seed, uint32_t high) { return static_cast<uint32_t>(mix64(seed ^ mix64(high))); }

// The 16 random bits of the element with lower index bits `low` in the span of `key`, whose float
// has the bits `x`.
constexpr uint32_t random16(uint32_t key, uint32_t low, uint32_t x) {
  return hash32(hash32(low ^ key) ^ (x >> 16)) >> 16;
}

// The bf16 bits of the float with bits x rounded up with the random bits r (< 2^16).
constexpr uint16_t round_bits(uint32_t x, uint32_t r) {
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + r) >> 16);
}

// Calls f(begin, end, key, low) for the spans [begin, end) of [0, n) whose indices first + i share
// their upper 32 bits (one span unless a model of over 2^32 parameters is crossed there); `low` is
// the lower 32 bits of first + begin.
template <class F>
void for_each_span(uint64_t seed, uint64_t first, size_t n, F&& f) {
  for (size_t begin = 0; begin < n;) {
    const uint64_t index = first + begin;
    const size_t end = static_cast<size_t>(
        std::min<uint64_t>(first + n, ((index >> 32) + 1) << 32) - first);
    f(begin, end, span_key(seed, static_cast<uint32_t>(index >> 32)), static_cast<uint32_t>(index));
    begin = end;
  }
}

}  // namespace bf16_rounding
}  // namespace frugal::kernels
