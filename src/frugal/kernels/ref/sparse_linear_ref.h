// Naive reference for the unstructured sparse linear products (kernel family sparse_linear): dense
// loops over W (OC,IC) with the 0/1 mask (OC,IC) applied. Templated on float/double so tests can
// compare the optimised kernels against fp64. Every output is one sum over its reduction index in
// ascending order (the masked terms skipped); as in matmul_ref.h the loops keep a row of those sums
// and run the innermost loop along contiguous memory (a transposed copy of W and the mask where
// the reduction runs along W's rows).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal::kernels::ref {

// out (N,OC) = inp (N,IC) · (W⊙M)ᵀ + bias (OC) or null
template <class T>
void sparse_linear_forward(T* out, const T* inp, const float* W, const uint8_t* mask,
                           const float* bias, int N, int IC, int OC) {
  std::vector<float> wt(static_cast<size_t>(IC) * OC);  // wt[i, o] = W[o, i]; mt[i, o] = mask[o, i]
  std::vector<uint8_t> mt(wt.size());
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      wt[static_cast<size_t>(i) * OC + o] = W[static_cast<size_t>(o) * IC + i];
      mt[static_cast<size_t>(i) * OC + o] = mask[static_cast<size_t>(o) * IC + i];
    }
  std::vector<T> row(OC);  // out[n, :]'s sums, over i = 0, 1, ...
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) row[o] = bias ? static_cast<T>(bias[o]) : T(0);
    for (int i = 0; i < IC; ++i) {
      const T x = inp[static_cast<size_t>(n) * IC + i];
      const float* wt_i = wt.data() + static_cast<size_t>(i) * OC;
      const uint8_t* mt_i = mt.data() + static_cast<size_t>(i) * OC;
      for (int o = 0; o < OC; ++o)
        if (mt_i[o]) row[o] += x * static_cast<T>(wt_i[o]);
    }
    for (int o = 0; o < OC; ++o) out[static_cast<size_t>(n) * OC + o] = row[o];
  }
}

// dinp (N,IC) = (or += when accumulate) dout (N,OC) · (W⊙M)
template <class T>
void sparse_linear_backward_input(T* dinp, const T* dout, const float* W, const uint8_t* mask,
                                  int N, int IC, int OC, bool accumulate) {
  std::vector<T> row(IC);  // dinp[n, :]'s sums, over o = 0, 1, ...
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < IC; ++i) row[i] = accumulate ? dinp[static_cast<size_t>(n) * IC + i] : T(0);
    for (int o = 0; o < OC; ++o) {
      const T d = dout[static_cast<size_t>(n) * OC + o];
      const float* w_o = W + static_cast<size_t>(o) * IC;
      const uint8_t* m_o = mask + static_cast<size_t>(o) * IC;
      for (int i = 0; i < IC; ++i)
        if (m_o[i]) row[i] += d * static_cast<T>(w_o[i]);
    }
    for (int i = 0; i < IC; ++i) dinp[static_cast<size_t>(n) * IC + i] = row[i];
  }
}

// dweight (OC,IC) += (doutᵀ · inp) ⊙ M: entries outside the mask are left as they are.
// dout (N,OC), inp (N,IC)
template <class T>
void sparse_linear_backward_weight(T* dweight, const T* dout, const T* inp, const uint8_t* mask,
                                   int N, int IC, int OC) {
  std::vector<T> row(IC);  // dweight[o, :]'s sums, over n = 0, 1, ... (kept where the mask is)
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < IC; ++i) row[i] = T(0);
    for (int n = 0; n < N; ++n) {
      const T d = dout[static_cast<size_t>(n) * OC + o];
      const T* inp_n = inp + static_cast<size_t>(n) * IC;
      for (int i = 0; i < IC; ++i) row[i] += d * inp_n[i];
    }
    for (int i = 0; i < IC; ++i)
      if (mask[static_cast<size_t>(o) * IC + i]) dweight[static_cast<size_t>(o) * IC + i] += row[i];
  }
}

}  // namespace frugal::kernels::ref
