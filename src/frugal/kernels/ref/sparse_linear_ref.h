// Naive reference for the unstructured sparse linear products (kernel family sparse_linear): dense
// loops over W (OC,IC) with the 0/1 mask (OC,IC) applied. Templated on float/double so tests can
// compare the optimised kernels against fp64.
#pragma once
#include <cstddef>
#include <cstdint>

namespace frugal::kernels::ref {

// out (N,OC) = inp (N,IC) · (W⊙M)ᵀ + bias (OC) or null
template <class T>
void sparse_linear_forward(T* out, const T* inp, const float* W, const uint8_t* mask,
                           const float* bias, int N, int IC, int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      T acc = bias ? static_cast<T>(bias[o]) : T(0);
      for (int i = 0; i < IC; ++i) {
        const size_t wi = static_cast<size_t>(o) * IC + i;
        if (mask[wi]) acc += inp[static_cast<size_t>(n) * IC + i] * static_cast<T>(W[wi]);
      }
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
}

// dinp (N,IC) = (or += when accumulate) dout (N,OC) · (W⊙M)
template <class T>
void sparse_linear_backward_input(T* dinp, const T* dout, const float* W, const uint8_t* mask,
                                  int N, int IC, int OC, bool accumulate) {
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < IC; ++i) {
      T acc = accumulate ? dinp[static_cast<size_t>(n) * IC + i] : T(0);
      for (int o = 0; o < OC; ++o) {
        const size_t wi = static_cast<size_t>(o) * IC + i;
        if (mask[wi]) acc += dout[static_cast<size_t>(n) * OC + o] * static_cast<T>(W[wi]);
      }
      dinp[static_cast<size_t>(n) * IC + i] = acc;
    }
}

// dweight (OC,IC) += (doutᵀ · inp) ⊙ M: entries outside the mask are left as they are.
// dout (N,OC), inp (N,IC)
template <class T>
void sparse_linear_backward_weight(T* dweight, const T* dout, const T* inp, const uint8_t* mask,
                                   int N, int IC, int OC) {
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      const size_t wi = static_cast<size_t>(o) * IC + i;
      if (!mask[wi]) continue;
      T acc = 0;
      for (int n = 0; n < N; ++n)
        acc += dout[static_cast<size_t>(n) * OC + o] * inp[static_cast<size_t>(n) * IC + i];
      dweight[wi] += acc;
    }
}

}  // namespace frugal::kernels::ref
