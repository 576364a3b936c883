// Naive reference of the mixture-of-experts kernels (ops.h section moe): the token-choice top-k
// router, the gather of each expert's rows and the weighted combine, the grouped linear. The test
// oracle for kernels/cpu/moe.cpp: obviously-correct scalar loops, templated on the scalar type so
// gradient checks can run in fp64, summing in Accum<T> (accumulator.h). Never optimised.
// Signatures and accumulation rules mirror kernels/ops.h.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "frugal/kernels/ref/accumulator.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/kernels/ref/matmul_ref.h"

namespace frugal::kernels::ref {

template <class T>
void moe_router_forward(T* probs, T* lse, int32_t* expert, T* weight, const T* logits, const T* bias,
                        int N, int E, int k) {
  for (int n = 0; n < N; ++n) {
    const T* z = logits + size_t(n) * E;
    T* p = probs + size_t(n) * E;
    T mx = z[0];
    for (int e = 1; e < E; ++e) mx = z[e] > mx ? z[e] : mx;
    Accum<T> sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(Accum<T>(z[e]) - mx);
    for (int e = 0; e < E; ++e) p[e] = T(std::exp(Accum<T>(z[e]) - mx) / sum);
    lse[n] = T(mx + std::log(sum));
    // selection: the largest remaining score, the first of equals
    std::vector<bool> taken(E, false);
    Accum<T> chosen = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (taken[e]) continue;
        const T score = bias ? T(p[e] + bias[e]) : p[e];
        const T best_score = best < 0 ? T(0) : bias ? T(p[best] + bias[best]) : p[best];
        if (best < 0 || score > best_score) best = e;
      }
      taken[best] = true;
      expert[size_t(n) * k + j] = best;
      chosen += p[best];
    }
    for (int j = 0; j < k; ++j) weight[size_t(n) * k + j] = T(p[expert[size_t(n) * k + j]] / chosen);
  }
}

template <class T>
void moe_router_backward(T* dlogits, const T* dweight, const T* probs, const T* lse, const int32_t* expert,
                         const T* weight, const T* dprobs, T dlse, int N, int E, int k) {
  std::vector<Accum<T>> dp(E);
  for (int n = 0; n < N; ++n) {
    const T* p = probs + size_t(n) * E;
    const int32_t* ex = expert + size_t(n) * k;
    const T* g = dweight + size_t(n) * k;
    const T* w = weight + size_t(n) * k;
    for (int e = 0; e < E; ++e) dp[e] = dprobs ? Accum<T>(dprobs[e]) : Accum<T>(0);
    // w_j = p_j / S over the chosen: d w_j / d p_i = (δ_ij − w_j) / S
    Accum<T> S = 0, gw = 0;
    for (int j = 0; j < k; ++j) S += p[ex[j]], gw += Accum<T>(g[j]) * w[j];
    for (int j = 0; j < k; ++j) dp[ex[j]] += (g[j] - gw) / S;
    // softmax: d z_e = p_e (dp_e − Σ p dp); the z-loss: d lse_n / d z_e = p_e
    Accum<T> dot = 0;
    for (int e = 0; e < E; ++e) dot += Accum<T>(p[e]) * dp[e];
    for (int e = 0; e < E; ++e)
      dlogits[size_t(n) * E + e] = T(p[e] * (dp[e] - dot + Accum<T>(dlse) * lse[n]));
  }
}

template <class T>
void moe_permute(T* out, const T* inp, const int32_t* src, int R, int C) {
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) out[size_t(i) * C + c] = inp[size_t(src[i]) * C + c];
}

template <class T>
void moe_unpermute(T* out, const T* inp, const int32_t* pos, const T* weight, int N, int k, int C,
                   bool accumulate) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      Accum<T> acc = accumulate ? Accum<T>(out[size_t(n) * C + c]) : Accum<T>(0);
      for (int j = 0; j < k; ++j) {
        const T w = weight ? weight[size_t(n) * k + j] : T(1);
        acc += Accum<T>(w) * inp[size_t(pos[size_t(n) * k + j]) * C + c];
      }
      out[size_t(n) * C + c] = T(acc);
    }
}

template <class T>
void moe_unpermute_backward(T* dinp, T* dweight, const T* dout, const T* inp, const int32_t* pos,
                            const T* weight, int N, int k, int C) {
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      const size_t row = size_t(pos[size_t(n) * k + j]);
      Accum<T> dot = 0;
      for (int c = 0; c < C; ++c) {
        dinp[row * C + c] = weight[size_t(n) * k + j] * dout[size_t(n) * C + c];
        dot += Accum<T>(dout[size_t(n) * C + c]) * inp[row * C + c];
      }
      dweight[size_t(n) * k + j] = T(dot);
    }
}

// Calls f(e, first row, rows) for every expert that received rows: what a grouped linear does per
// expert, here and in the CPU kernel.
template <class F>
void for_each_expert_group(const int32_t* offsets, int E, F&& f) {
  for (int e = 0; e < E; ++e)
    if (offsets[e + 1] > offsets[e]) f(e, size_t(offsets[e]), offsets[e + 1] - offsets[e]);
}

template <class T>
void moe_grouped_forward(T* out, const T* inp, const T* weight, const T* bias, const int32_t* offsets,
                         int E, int C, int OC) {
  for_each_expert_group(offsets, E, [&](int e, size_t r0, int rows) {
    matmul_forward(out + r0 * OC, inp + r0 * C, weight + size_t(e) * OC * C,
                   bias ? bias + size_t(e) * OC : nullptr, rows, C, OC);
  });
}

template <class T>
void moe_grouped_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                          const int32_t* offsets, int E, int C, int OC, bool accumulate_dinp) {
  for_each_expert_group(offsets, E, [&](int e, size_t r0, int rows) {
    matmul_backward(dinp ? dinp + r0 * C : nullptr, dweight ? dweight + size_t(e) * OC * C : nullptr,
                    dbias ? dbias + size_t(e) * OC : nullptr, dout + r0 * OC, inp + r0 * C,
                    weight + size_t(e) * OC * C, rows, C, OC, accumulate_dinp);
  });
}

// The bf16 grouped linear: the fp32 reference on the rows rounded to bf16 and the bf16 weights
// widened; the bias gradient from the fp32 dout.
inline void moe_grouped_forward_bf16(float* out, const float* inp, const bf16* weight, const float* bias,
                                     const int32_t* offsets, int E, int C, int OC) {
  const std::vector<float> x = rounded(inp, size_t(offsets[E]) * C), w = widened(weight, size_t(E) * OC * C);
  moe_grouped_forward<float>(out, x.data(), w.data(), bias, offsets, E, C, OC);
}
inline void moe_grouped_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                      const bf16* weight, const int32_t* offsets, int E, int C, int OC,
                                      bool accumulate_dinp) {
  const size_t R = size_t(offsets[E]);
  const std::vector<float> dy = rounded(dout, R * OC), x = rounded(inp, R * C), w = widened(weight, size_t(E) * OC * C);
  moe_grouped_backward<float>(dinp, dweight, nullptr, dy.data(), x.data(), w.data(), offsets, E, C, OC, accumulate_dinp);
  if (dbias)
    for_each_expert_group(offsets, E, [&](int e, size_t r0, int rows) {
      for (int o = 0; o < OC; ++o) {
        double sum = 0;
        for (int r = 0; r < rows; ++r) sum += dout[(r0 + r) * OC + o];
        dbias[size_t(e) * OC + o] += float(sum);
      }
    });
}

}  // namespace frugal::kernels::ref
