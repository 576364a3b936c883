// Naive reference of the dense linear (ops.h section matmul): the test oracle for kernels/cpu/.
// Obviously-correct scalar loops, templated on the scalar type so gradient checks can run in fp64,
// summing in Accum<T> (accumulator.h); a gradient's product is formed whole, then added once.
// Never blocked or reordered: every output is one sum over its reduction index in ascending order.
// The loops keep a row of those sums and run the innermost loop along contiguous memory (a row of
// inputs or weights), so the sums are the same as a dot product per output, and the reference
// path (FRUGAL_ISA=ref), whose runs are mostly these GEMMs, is not limited by strided loads.
// Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "frugal/kernels/ref/accumulator.h"

namespace frugal::kernels::ref {

// out[N, OC] = inp[N, C] · w[OC, C]ᵀ + bias: out[i, o] = bias[o] + Σ_c inp[i, c]·w[o, c].
// Works on a transposed copy of w (OC·C more values for the call).
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  std::vector<T> wt(static_cast<size_t>(C) * OC);  // wt[c, o] = w[o, c]
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) wt[static_cast<size_t>(c) * OC + o] = w[static_cast<size_t>(o) * C + c];
  std::vector<Accum<T>> row(OC);  // out[i, :]'s sums, over c = 0, 1, ...
  for (int i = 0; i < N; ++i) {
    for (int o = 0; o < OC; ++o) row[o] = bias ? bias[o] : T(0);
    for (int c = 0; c < C; ++c) {
      const Accum<T> x = inp[static_cast<size_t>(i) * C + c];
      const T* wt_c = wt.data() + static_cast<size_t>(c) * OC;
      for (int o = 0; o < OC; ++o) row[o] += x * wt_c[o];
    }
    for (int o = 0; o < OC; ++o) out[static_cast<size_t>(i) * OC + o] = T(row[o]);
  }
}

// dinp[i, c] (+)= Σ_o dout[i, o]·w[o, c]; dw[o, c] += Σ_i dout[i, o]·inp[i, c];
// dbias[o] += Σ_i dout[i, o].
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC, bool accumulate_dinp) {
  std::vector<Accum<T>> row(C);
  if (dinp)
    for (int i = 0; i < N; ++i) {
      std::fill(row.begin(), row.end(), Accum<T>(0));  // dinp[i, :]'s sums, over o = 0, 1, ...
      for (int o = 0; o < OC; ++o) {
        const Accum<T> d = dout[static_cast<size_t>(i) * OC + o];
        const T* w_o = w + static_cast<size_t>(o) * C;
        for (int c = 0; c < C; ++c) row[c] += d * w_o[c];
      }
      for (int c = 0; c < C; ++c) {
        T& dst = dinp[static_cast<size_t>(i) * C + c];
        dst = accumulate_dinp ? T(dst + row[c]) : T(row[c]);
      }
    }
  for (int o = 0; o < OC; ++o) {
    if (dbias) {
      Accum<T> acc = 0;
      for (int i = 0; i < N; ++i) acc += dout[static_cast<size_t>(i) * OC + o];
      dbias[o] += T(acc);
    }
    if (dw) {
      std::fill(row.begin(), row.end(), Accum<T>(0));  // dw[o, :]'s sums, over i = 0, 1, ...
      for (int i = 0; i < N; ++i) {
        const Accum<T> d = dout[static_cast<size_t>(i) * OC + o];
        const T* inp_i = inp + static_cast<size_t>(i) * C;
        for (int c = 0; c < C; ++c) row[c] += d * inp_i[c];
      }
      for (int c = 0; c < C; ++c) dw[static_cast<size_t>(o) * C + c] += T(row[c]);
    }
  }
}

}  // namespace frugal::kernels::ref
