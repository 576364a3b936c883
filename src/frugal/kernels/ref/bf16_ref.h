// Naive reference of the bf16 family (ops.h section bf16): the rounding spelled out on the bits,
// and the linear's GEMMs as the fp32 reference matmul on the operands widened to float (a bf16
// product is exact in float, so only the order of the sums differs from an optimised kernel).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/dtype.h"
#include "frugal/kernels/ref/matmul_ref.h"

namespace frugal::kernels::ref {

inline bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40u);  // NaN: keep it, quiet
  const uint32_t lsb = (u >> 16) & 1u;                                     // ties go to even
  return bf16((u + 0x7fffu + lsb) >> 16);
}

// x, the element at index `index` of the whole parameter vector, rounded stochastically with the
// seed (kernels/bf16_rounding.h), element by element from its 64-bit index.
inline bf16 to_bf16_stochastic(float x, uint64_t seed, uint64_t index) {
  namespace r = bf16_rounding;
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t key = r::span_key(seed, static_cast<uint32_t>(index >> 32));
  return bf16(r::round_bits(u, r::random16(key, static_cast<uint32_t>(index), u)));
}

// in (n) rounded into out as `rounding` says.
inline void round_to_bf16(bf16* out, const float* in, size_t n, const Bf16Rounding& rounding) {
  for (size_t i = 0; i < n; ++i)
    out[i] = rounding.stochastic ? to_bf16_stochastic(in[i], rounding.seed, rounding.first + i) : to_bf16(in[i]);
}

inline float to_f32(bf16 x) {
  const uint32_t u = uint32_t(static_cast<uint16_t>(x)) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::vector<float> widened(const bf16* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_f32(x[i]);
  return out;
}

// x (n floats) rounded to bf16 and widened back.
inline std::vector<float> rounded(const float* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_f32(to_bf16(x[i]));
  return out;
}

// dout (N,OC) rounded into out, and dbias (OC) += its column sums (the reference matmul's).
inline void f32_to_bf16_bias_grad(bf16* out, float* dbias, const float* dout, int N, int OC) {
  for (size_t i = 0; i < size_t(N) * OC; ++i) out[i] = to_bf16(dout[i]);
  matmul_backward<float>(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, 0, OC, false);
}

inline void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                                int C, int OC) {
  const std::vector<float> x = widened(inp, size_t(N) * C), w = widened(weight, size_t(OC) * C);
  matmul_forward(out, x.data(), w.data(), bias, N, C, OC);
}

inline void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp,
                                 const bf16* weight, int N, int C, int OC, bool accumulate_dinp) {
  const std::vector<float> dy = widened(dout, size_t(N) * OC), w = widened(weight, size_t(OC) * C),
                           x = inp ? widened(inp, size_t(N) * C) : std::vector<float>();
  matmul_backward(dinp, dweight, static_cast<float*>(nullptr), dy.data(), inp ? x.data() : nullptr, w.data(), N,
                  C, OC, accumulate_dinp);
}

}  // namespace frugal::kernels::ref
