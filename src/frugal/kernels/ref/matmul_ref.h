// Naive reference of the dense linear (ops.h section matmul): the test oracle for kernels/cpu/.
// Obviously-correct scalar loops, templated on the scalar type so gradient checks can run in fp64.
// Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cstddef>

namespace frugal::kernels::ref {

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      T acc = bias ? bias[o] : T(0);
      for (int c = 0; c < C; ++c) acc += inp[static_cast<size_t>(i) * C + c] * w[static_cast<size_t>(o) * C + c];
      out[static_cast<size_t>(i) * OC + o] = acc;
    }
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC, bool accumulate_dinp) {
  for (int i = 0; i < N; ++i) {
    const T* d = dout + static_cast<size_t>(i) * OC;
    if (dinp)
      for (int c = 0; c < C; ++c) {
        T acc = 0;
        for (int o = 0; o < OC; ++o) acc += d[o] * w[static_cast<size_t>(o) * C + c];
        T& dst = dinp[static_cast<size_t>(i) * C + c];
        dst = accumulate_dinp ? dst + acc : acc;
      }
    for (int o = 0; o < OC; ++o) {
      if (dbias) dbias[o] += d[o];
      if (dw)
        for (int c = 0; c < C; ++c) dw[static_cast<size_t>(o) * C + c] += d[o] * inp[static_cast<size_t>(i) * C + c];
    }
  }
}

}  // namespace frugal::kernels::ref
