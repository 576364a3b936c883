// Naive reference of the token + position embedding (ops.h section encoder): the test oracle for
// kernels/cpu/. Obviously-correct scalar loops, templated on the scalar type so gradient checks can
// run in fp64. Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cstddef>
#include <cstdint>

namespace frugal::kernels::ref {

template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* e = wte + static_cast<size_t>(tokens[b * Tn + t]) * C;
      T* o = out + (static_cast<size_t>(b) * Tn + t) * C;
      for (int c = 0; c < C; ++c) o[c] = wpe ? e[c] + wpe[static_cast<size_t>(t) * C + c] : e[c];
    }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                      int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* d = dout + (static_cast<size_t>(b) * Tn + t) * C;
      for (int c = 0; c < C; ++c) {
        if (dwte) dwte[static_cast<size_t>(tokens[b * Tn + t]) * C + c] += d[c];
        if (dwpe) dwpe[static_cast<size_t>(t) * C + c] += d[c];
      }
    }
}

}  // namespace frugal::kernels::ref
