// Naive reference of the fused AdamW update (ops.h section adamw): the test oracle for
// kernels/cpu/. Obviously-correct scalar loops, templated on the scalar type so gradient checks can
// run in fp64. Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace frugal::kernels::ref {

// AdamW with decoupled decay, PyTorch semantics, on the gradient g · grad_scale.
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, size_t n, T lr, T b1, T b2, T eps, T wd,
                  int64_t t, bool decay, T grad_scale = T(1)) {
  const T c1 = T(1) - std::pow(b1, static_cast<T>(t));
  const T c2 = T(1) - std::pow(b2, static_cast<T>(t));
  for (size_t i = 0; i < n; ++i) {
    const T gi = g[i] * grad_scale;
    if (decay) p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }
}

}  // namespace frugal::kernels::ref
