// Naive reference of LayerNorm (ops.h section layernorm): the test oracle for kernels/cpu/.
// Obviously-correct scalar loops, templated on the scalar type so gradient checks can run in fp64,
// summing in Accum<T> (accumulator.h); the parameter gradients are formed whole, then added once.
// Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "frugal/kernels/ref/accumulator.h"

namespace frugal::kernels::ref {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* bias, int N,
                       int C, T eps) {
  using A = Accum<T>;
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    A sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const T m = T(sum / C);
    A var = 0;
    for (int c = 0; c < C; ++c) var += A(x[c] - m) * (x[c] - m);
    const T s = T(1) / std::sqrt(T(var / C) + eps);
    for (int c = 0; c < C; ++c)
      out[static_cast<size_t>(i) * C + c] = (x[c] - m) * s * w[c] + (bias ? bias[c] : T(0));
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  using A = Accum<T>;
  std::vector<A> dw_sum(C, A(0)), dbias_sum(C, A(0));
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    const T* d = dout + static_cast<size_t>(i) * C;
    A mean_dn = 0, mean_dn_xhat = 0;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      const T dn = d[c] * w[c];
      mean_dn += dn;
      mean_dn_xhat += A(dn) * xhat;
    }
    mean_dn /= C;
    mean_dn_xhat /= C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      dbias_sum[c] += d[c];
      dw_sum[c] += A(d[c]) * xhat;
      if (dinp)
        dinp[static_cast<size_t>(i) * C + c] += T((d[c] * w[c] - mean_dn - xhat * mean_dn_xhat) * rstd[i]);
    }
  }
  for (int c = 0; c < C; ++c) {
    if (dbias) dbias[c] += T(dbias_sum[c]);
    if (dw) dw[c] += T(dw_sum[c]);
  }
}

}  // namespace frugal::kernels::ref
