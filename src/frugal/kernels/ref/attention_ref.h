// Naive reference for causal self-attention (the test oracle for kernels/cpu/attention.cpp and
// kernels/cpu/attention_decode.cpp).
// Templated on the scalar type so the gradient check runs in fp64. One softmax row at a time,
// scores materialised per row; obviously correct, never optimised. Shapes as in kernels/ops.h
// (Tn is the sequence length T; HS = C / NH).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace frugal::kernels::ref {

// out (B,Tn,C), lse (B,NH,Tn); qkv (B,Tn,3C) laid out [q | k | v], head h at columns h*HS..h*HS+HS
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int Tn, int C, int NH) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  std::vector<T> p(Tn);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < Tn; ++i) {
        const T* q = qkv + (static_cast<size_t>(b) * Tn + i) * 3 * C + h * HS;
        T maxs = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const T* k = qkv + (static_cast<size_t>(b) * Tn + j) * 3 * C + C + h * HS;
          T s = 0;
          for (int d = 0; d < HS; ++d) s += q[d] * k[d];
          p[j] = s * scale;
          maxs = std::max(maxs, p[j]);
        }
        T sum = 0;
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - maxs));
        T* o = out + (static_cast<size_t>(b) * Tn + i) * C + h * HS;
        for (int d = 0; d < HS; ++d) o[d] = 0;
        for (int j = 0; j <= i; ++j) {
          const T* v = qkv + (static_cast<size_t>(b) * Tn + j) * 3 * C + 2 * C + h * HS;
          for (int d = 0; d < HS; ++d) o[d] += p[j] / sum * v[d];
        }
        lse[(static_cast<size_t>(b) * NH + h) * Tn + i] = maxs + std::log(sum);
      }
}

// dqkv (B,Tn,3C) =; dout (B,Tn,C), qkv, lse from the forward. `out` is not read here: the softmax
// backward uses D_i = Σ_j p_ij dp_ij directly, the definition the optimised kernel's
// rowsum(dO_i ∘ O_i) must agree with.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int Tn, int C, int NH) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  std::fill(dqkv, dqkv + static_cast<size_t>(B) * Tn * 3 * C, T(0));
  std::vector<T> p(Tn), dp(Tn);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < Tn; ++i) {
        const size_t qi = (static_cast<size_t>(b) * Tn + i) * 3 * C + h * HS;
        const T* q = qkv + qi;
        const T* dO = dout + (static_cast<size_t>(b) * Tn + i) * C + h * HS;
        const T L = lse[(static_cast<size_t>(b) * NH + h) * Tn + i];
        T D = 0;
        for (int j = 0; j <= i; ++j) {
          const size_t kj = (static_cast<size_t>(b) * Tn + j) * 3 * C + h * HS;
          T s = 0, dpj = 0;
          for (int d = 0; d < HS; ++d) {
            s += q[d] * qkv[kj + C + d];
            dpj += dO[d] * qkv[kj + 2 * C + d];
          }
          p[j] = std::exp(s * scale - L);
          dp[j] = dpj;
          D += p[j] * dpj;
        }
        for (int j = 0; j <= i; ++j) {
          const size_t kj = (static_cast<size_t>(b) * Tn + j) * 3 * C + h * HS;
          const T ds = p[j] * (dp[j] - D) * scale;  // d loss / d (q·k)
          for (int d = 0; d < HS; ++d) {
            dqkv[qi + d] += ds * qkv[kj + C + d];
            dqkv[kj + C + d] += ds * q[d];
            dqkv[kj + 2 * C + d] += p[j] * dO[d];
          }
        }
      }
}

// out (C); q (C), k_cache (t,C), v_cache (t,C): one query row against t cached positions.
template <class T>
void attention_decode(T* out, const T* q, const T* k_cache, const T* v_cache, int t, int C,
                      int NH) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  std::vector<T> p(t);
  for (int h = 0; h < NH; ++h) {
    T maxs = -INFINITY;
    for (int j = 0; j < t; ++j) {
      T s = 0;
      for (int d = 0; d < HS; ++d) s += q[h * HS + d] * k_cache[static_cast<size_t>(j) * C + h * HS + d];
      p[j] = s * scale;
      maxs = std::max(maxs, p[j]);
    }
    T sum = 0;
    for (int j = 0; j < t; ++j) sum += (p[j] = std::exp(p[j] - maxs));
    for (int d = 0; d < HS; ++d) {
      T o = 0;
      for (int j = 0; j < t; ++j) o += p[j] * v_cache[static_cast<size_t>(j) * C + h * HS + d];
      out[h * HS + d] = o / sum;
    }
  }
}

}  // namespace frugal::kernels::ref
