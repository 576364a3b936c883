// The bf16 conversions (and the output gradient's rounding with its bias gradient) as loops the compiler vectorises for the instruction set of the file that
// includes this header (bf16.cpp: AVX2, the build's baseline; bf16_avx512.cpp: AVX-512), branch
// free, with the reference's rounding (kernels/ref/bf16_ref.h) bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "frugal/core/profile.h"
#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/cpu/column_sums.h"
#include "frugal/kernels/dtype.h"

namespace frugal::kernels::cpu {
namespace {  // each including file gets its own instance, compiled for its instruction set

inline bf16 bf16_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return bf16((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : rounded);
}

inline void f32_to_bf16_loop(bf16* out, const float* in, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (size_t(1) << 18))
  for (size_t i = 0; i < n; ++i) out[i] = bf16_of(in[i]);
}

// round_to_bf16: to nearest, or stochastically with the random bits of bf16_rounding.h, a span of
// indices at a time.
inline void round_to_bf16_loop(bf16* out, const float* in, size_t n, const Bf16Rounding& rounding) {
  if (!rounding.stochastic) return f32_to_bf16_loop(out, in, n);
  namespace r = bf16_rounding;
  r::for_each_span(rounding.seed, rounding.first, n, [&](size_t begin, size_t end, uint32_t key, uint32_t low) {
#pragma omp parallel for simd schedule(static) if (end - begin >= (size_t(1) << 18))
    for (size_t i = begin; i < end; ++i) {
      uint32_t x;
      std::memcpy(&x, in + i, sizeof x);
      out[i] = bf16(r::round_bits(x, r::random16(key, low + static_cast<uint32_t>(i - begin), x)));
    }
  });
}

// A linear's output gradient rounded for its bf16 GEMMs and its bias gradient in one pass over it:
// each row is rounded as add_column_sums reaches it, still in cache for its sums.
inline void f32_to_bf16_bias_grad_loop(bf16* out, float* dbias, const float* dout, int N, int OC) {
  FRUGAL_PROFILE("bf16 output grad + bias grad");
  add_column_sums(dbias, dout, N, OC, [&](int i) {
    const float* row = dout + static_cast<size_t>(i) * OC;
    bf16* o = out + static_cast<size_t>(i) * OC;
#pragma omp simd
    for (int c = 0; c < OC; ++c) o[c] = bf16_of(row[c]);
  });
}

inline void bf16_to_f32_loop(float* out, const bf16* in, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (size_t(1) << 18))
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = uint32_t(static_cast<uint16_t>(in[i])) << 16;
    std::memcpy(out + i, &x, sizeof x);
  }
}

}  // namespace
}  // namespace frugal::kernels::cpu
