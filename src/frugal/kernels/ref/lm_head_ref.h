// Naive reference of the LM head with softmax cross-entropy (ops.h section lm_head): the test
// oracle for kernels/cpu/. Obviously-correct scalar loops, templated on the scalar type so gradient
// checks can run in fp64. Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal::kernels::ref {

// Per-row cross-entropy of logits = inp · weight[:V]ᵀ; mirrors ops.h lm_head_cross_entropy.
template <class T>
void lm_head_cross_entropy(T* losses, T* dinp, T* dw, const T* inp, const T* w,
                           const int32_t* targets, int N, int C, int V, T dloss) {
  std::vector<T> logits(V);
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    if (targets[i] < 0) {
      losses[i] = 0;
      if (dinp) for (int c = 0; c < C; ++c) dinp[static_cast<size_t>(i) * C + c] = 0;
      continue;
    }
    T mx = -INFINITY;
    for (int v = 0; v < V; ++v) {
      T acc = 0;
      for (int c = 0; c < C; ++c) acc += x[c] * w[static_cast<size_t>(v) * C + c];
      logits[v] = acc;
      mx = std::max(mx, acc);
    }
    T sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[v] - mx);
    const T lse = mx + std::log(sum);
    losses[i] = lse - logits[targets[i]];
    if (dinp) for (int c = 0; c < C; ++c) dinp[static_cast<size_t>(i) * C + c] = 0;
    for (int v = 0; v < V; ++v) {
      const T g = (std::exp(logits[v] - lse) - (v == targets[i] ? T(1) : T(0))) * dloss;
      for (int c = 0; c < C; ++c) {
        if (dinp) dinp[static_cast<size_t>(i) * C + c] += g * w[static_cast<size_t>(v) * C + c];
        if (dw) dw[static_cast<size_t>(v) * C + c] += g * x[c];
      }
    }
  }
}

}  // namespace frugal::kernels::ref
