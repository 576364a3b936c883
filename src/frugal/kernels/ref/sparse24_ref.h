// Naive reference for the 2:4 sparse linear products: a 2:4 mask is a mask like any other, so
// these are the masked dense loops of the unstructured family (sparse_linear_ref.h), named for the
// 2:4 kernels they check. Templated on float/double so tests can compare against fp64.
#pragma once
#include <cstdint>

#include "frugal/kernels/ref/sparse_linear_ref.h"

namespace frugal::kernels::ref {

// out (N,OC) = inp (N,IC) · (mask ⊙ W)ᵀ + bias (OC) or null; W (OC,IC), mask (OC,IC) 0/1
template <class T>
void sparse24_matmul_forward(T* out, const T* inp, const float* W, const uint8_t* mask,
                             const float* bias, int N, int IC, int OC) {
  sparse_linear_forward(out, inp, W, mask, bias, N, IC, OC);
}

// dinp (N,IC) = (or += when accumulate) dout (N,OC) · (mask ⊙ W); W (OC,IC), mask (OC,IC)
template <class T>
void sparse24_matmul_backward_input(T* dinp, const T* dout, const float* W, const uint8_t* mask,
                                    int N, int IC, int OC, bool accumulate) {
  sparse_linear_backward_input(dinp, dout, W, mask, N, IC, OC, accumulate);
}

}  // namespace frugal::kernels::ref
