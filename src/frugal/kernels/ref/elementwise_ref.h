// Naive reference of the element-wise kernels (ops.h section elementwise): residual add, scaling,
// dropout and the sum of squares. Obviously-correct scalar loops, templated on the scalar type.
// Never optimised. Signatures mirror kernels/ops.h; the sum of squares adds every square in
// double, in order (the optimised kernel's lane and chunk order is its own).
#pragma once
#include <cstddef>
#include <cstdint>

#include "frugal/core/rng.h"

namespace frugal::kernels::ref {

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void scale_inplace(T* x, size_t n, T s) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// x (n) *= keep(key, first + i) / (1 - p): the mask of ops.h's dropout_apply.
template <class T>
void dropout_apply(T* x, size_t n, T p, uint64_t key, size_t first) {
  if (p <= T(0)) return;
  const T keep_scale = T(1) / (T(1) - p);
  for (size_t i = 0; i < n; ++i) x[i] = uniform_at(key, first + i) < p ? T(0) : x[i] * keep_scale;
}

template <class T>
double sum_squares(const T* x, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

}  // namespace frugal::kernels::ref
