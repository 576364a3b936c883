// Naive reference of the LM head with softmax cross-entropy (ops.h section lm_head): the test
// oracle for kernels/cpu/. Obviously-correct scalar loops, templated on the scalar type so gradient
// checks can run in fp64, summing in Accum<T> (accumulator.h); the weight gradient is formed whole,
// then added once. Never optimised. Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/accumulator.h"
#include "frugal/kernels/ref/bf16_ref.h"

namespace frugal::kernels::ref {

// d loss / d logit as it enters the backward products: kept (fp32 and fp64 heads), or rounded to
// bf16 (the bf16 head).
struct KeepGrad {
  template <class A>
  A operator()(A g) const { return g; }
};
struct Bf16Grad {
  template <class A>
  A operator()(A g) const { return A(to_f32(to_bf16(float(g)))); }
};

// logits (n) = softcap · tanh(logits / softcap); mirrors ops.h lm_head_softcap.
template <class T>
void lm_head_softcap(T* logits, size_t n, T softcap) {
  for (size_t i = 0; i < n; ++i) logits[i] = softcap * std::tanh(logits[i] / softcap);
}

// The logit of a dot product z and d logit / d z: z itself (softcap 0), or the capped logit.
template <class A>
std::pair<A, A> capped_logit(A z, A softcap) {
  if (softcap <= 0) return {z, A(1)};
  const A t = std::tanh(z / softcap);
  return {softcap * t, 1 - t * t};
}

// Per-row cross-entropy of logits = inp · weight[:V]ᵀ (+ bias; capped with softcap > 0); mirrors
// ops.h lm_head_cross_entropy.
template <class T, class Grad = KeepGrad>
void lm_head_cross_entropy(T* losses, T* dinp, T* dw, const T* inp, const T* w,
                           const int32_t* targets, int N, int C, int V, T dloss, T softcap = T(0),
                           Grad grad = {}, const T* bias = nullptr, T* dbias = nullptr) {
  using A = Accum<T>;
  std::vector<A> logits(V), slope(V), dx(C), dw_sum(dw ? static_cast<size_t>(V) * C : 0, A(0));
  std::vector<A> db_sum(dbias ? V : 0, A(0));
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    std::fill(dx.begin(), dx.end(), A(0));
    if (targets[i] < 0) {
      losses[i] = 0;
      if (dinp) std::fill(dinp + static_cast<size_t>(i) * C, dinp + static_cast<size_t>(i + 1) * C, T(0));
      continue;
    }
    A mx = -INFINITY;
    for (int v = 0; v < V; ++v) {
      A acc = bias ? A(bias[v]) : A(0);
      for (int c = 0; c < C; ++c) acc += A(x[c]) * w[static_cast<size_t>(v) * C + c];
      std::tie(logits[v], slope[v]) = capped_logit(acc, A(softcap));
      mx = std::max(mx, logits[v]);
    }
    A sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[v] - mx);
    const A lse = mx + std::log(sum);
    losses[i] = T(lse - logits[targets[i]]);
    for (int v = 0; v < V; ++v) {
      // the bias gradient takes d loss / d logit unrounded: it is a sum, not one of the GEMMs
      const A raw = (std::exp(logits[v] - lse) - (v == targets[i] ? A(1) : A(0))) * dloss * slope[v];
      const A g = grad(raw);
      if (dbias) db_sum[v] += raw;
      for (int c = 0; c < C; ++c) {
        dx[c] += g * w[static_cast<size_t>(v) * C + c];
        if (dw) dw_sum[static_cast<size_t>(v) * C + c] += g * x[c];
      }
    }
    if (dinp)
      for (int c = 0; c < C; ++c) dinp[static_cast<size_t>(i) * C + c] = T(dx[c]);
  }
  for (size_t k = 0; k < dw_sum.size(); ++k) dw[k] += T(dw_sum[k]);
  for (size_t v = 0; v < db_sum.size(); ++v) dbias[v] += T(db_sum[v]);
}

// The vocabulary-split cross-entropy over this rank's V columns; mirrors ops.h
// lm_head_cross_entropy_split (the rows' statistics reduced over the group in float, once for
// all N rows: the maxima, then the sums of exponentials with the target logits).
template <class T, class Grad = KeepGrad>
void lm_head_cross_entropy_split(T* losses, T* dinp, T* dw, const T* inp, const T* w,
                                 const int32_t* targets, int N, int C, int V, T dloss,
                                 const VocabSplit& split, T softcap = T(0), Grad grad = {}) {
  using A = Accum<T>;
  std::vector<A> logits(static_cast<size_t>(N) * V), slope(logits.size());
  std::vector<float> mx(N, -INFINITY), stats(2 * static_cast<size_t>(N), 0.0f);  // sums | target logits
  for (int i = 0; i < N; ++i)
    for (int v = 0; v < V; ++v) {
      A acc = 0;
      for (int c = 0; c < C; ++c) acc += A(inp[static_cast<size_t>(i) * C + c]) * w[static_cast<size_t>(v) * C + c];
      const size_t at = static_cast<size_t>(i) * V + v;
      std::tie(logits[at], slope[at]) = capped_logit(acc, A(softcap));
      mx[i] = std::max(mx[i], float(logits[at]));
      if (targets[i] - split.first == v) stats[N + i] = float(logits[at]);
    }
  split.all_reduce_max(mx.data(), N);
  for (int i = 0; i < N; ++i) {
    A sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[static_cast<size_t>(i) * V + v] - A(mx[i]));
    stats[i] = float(sum);
  }
  split.all_reduce_sum(stats.data(), stats.size());
  std::vector<A> dw_sum(dw ? static_cast<size_t>(V) * C : 0, A(0));
  for (int i = 0; i < N; ++i) {
    std::vector<A> dx(C, A(0));
    if (targets[i] >= 0) {
      const A lse = A(mx[i]) + std::log(A(stats[i]));
      losses[i] = T(lse - A(stats[N + i]));
      for (int v = 0; v < V; ++v) {
        const size_t at = static_cast<size_t>(i) * V + v;
        const A g = grad((std::exp(logits[at] - lse) - (v == targets[i] - split.first ? A(1) : A(0))) * dloss *
                         slope[at]);
        for (int c = 0; c < C; ++c) {
          dx[c] += g * w[static_cast<size_t>(v) * C + c];
          if (dw) dw_sum[static_cast<size_t>(v) * C + c] += g * inp[static_cast<size_t>(i) * C + c];
        }
      }
    } else {
      losses[i] = 0;
    }
    if (dinp)
      for (int c = 0; c < C; ++c) dinp[static_cast<size_t>(i) * C + c] = T(dx[c]);
  }
  for (size_t k = 0; k < dw_sum.size(); ++k) dw[k] += T(dw_sum[k]);
}

// The bf16 head (ops.h lm_head_cross_entropy_bf16 and _split_bf16): the fp32 reference on the rows
// of inp rounded to bf16, the bf16 weight widened, and d loss / d logit rounded to bf16.
inline void lm_head_cross_entropy_bf16(float* losses, float* dinp, float* dw, const float* inp,
                                       const bf16* w, const int32_t* targets, int N, int C, int V,
                                       float dloss, float softcap, const LmHeadBias& bias = {}) {
  const std::vector<float> x = rounded(inp, size_t(N) * C), wf = widened(w, size_t(V) * C);
  lm_head_cross_entropy<float>(losses, dinp, dw, x.data(), wf.data(), targets, N, C, V, dloss, softcap, Bf16Grad{},
                               bias.bias, bias.dbias);
}
inline void lm_head_cross_entropy_split_bf16(float* losses, float* dinp, float* dw, const float* inp,
                                             const bf16* w, const int32_t* targets, int N, int C, int V,
                                             float dloss, const VocabSplit& split, float softcap) {
  const std::vector<float> x = rounded(inp, size_t(N) * C), wf = widened(w, size_t(V) * C);
  lm_head_cross_entropy_split<float>(losses, dinp, dw, x.data(), wf.data(), targets, N, C, V, dloss, split,
                                     softcap, Bf16Grad{});
}

}  // namespace frugal::kernels::ref
