// Naive reference of LayerNorm (ops.h section layernorm): the test oracle for kernels/cpu/.
// Obviously-correct scalar loops, templated on the scalar type so gradient checks can run in fp64.
// Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cmath>
#include <cstddef>

namespace frugal::kernels::ref {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* bias, int N,
                       int C, T eps) {
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    T m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const T s = T(1) / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c)
      out[static_cast<size_t>(i) * C + c] = (x[c] - m) * s * w[c] + (bias ? bias[c] : T(0));
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    const T* d = dout + static_cast<size_t>(i) * C;
    T mean_dn = 0, mean_dn_xhat = 0;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      const T dn = d[c] * w[c];
      mean_dn += dn;
      mean_dn_xhat += dn * xhat;
    }
    mean_dn /= C;
    mean_dn_xhat /= C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      if (dbias) dbias[c] += d[c];
      if (dw) dw[c] += d[c] * xhat;
      if (dinp)
        dinp[static_cast<size_t>(i) * C + c] += (d[c] * w[c] - mean_dn - xhat * mean_dn_xhat) * rstd[i];
    }
  }
}

}  // namespace frugal::kernels::ref
