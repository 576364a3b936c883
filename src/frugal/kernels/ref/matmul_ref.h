// Naive reference of the dense linear (ops.h section matmul): the test oracle for kernels/cpu/.
// Obviously-correct scalar loops, templated on the scalar type so gradient checks can run in fp64,
// summing in Accum<T> (accumulator.h); a gradient's product is formed whole, then added once.
// Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cstddef>

#include "frugal/kernels/ref/accumulator.h"

namespace frugal::kernels::ref {

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      Accum<T> acc = bias ? bias[o] : T(0);
      for (int c = 0; c < C; ++c)
        acc += Accum<T>(inp[static_cast<size_t>(i) * C + c]) * w[static_cast<size_t>(o) * C + c];
      out[static_cast<size_t>(i) * OC + o] = T(acc);
    }
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC, bool accumulate_dinp) {
  if (dinp)
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        Accum<T> acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += Accum<T>(dout[static_cast<size_t>(i) * OC + o]) * w[static_cast<size_t>(o) * C + c];
        T& dst = dinp[static_cast<size_t>(i) * C + c];
        dst = accumulate_dinp ? T(dst + acc) : T(acc);
      }
  for (int o = 0; o < OC; ++o) {
    if (dbias) {
      Accum<T> acc = 0;
      for (int i = 0; i < N; ++i) acc += dout[static_cast<size_t>(i) * OC + o];
      dbias[o] += T(acc);
    }
    if (dw)
      for (int c = 0; c < C; ++c) {
        Accum<T> acc = 0;
        for (int i = 0; i < N; ++i)
          acc += Accum<T>(dout[static_cast<size_t>(i) * OC + o]) * inp[static_cast<size_t>(i) * C + c];
        dw[static_cast<size_t>(o) * C + c] += T(acc);
      }
  }
}

}  // namespace frugal::kernels::ref
