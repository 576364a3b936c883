// Naive reference for self-attention under an AttentionPattern (the test oracle for
// kernels/cpu/attention.cpp and kernels/cpu/attention_decode.cpp).
// Templated on the scalar type so the gradient check runs in fp64. One softmax row at a time over
// the keys pattern.allows(i, j) admits, scores materialised per row; obviously correct, never
// optimised (it reads only allows(), none of the pattern's bulk answers). Shapes as in
// kernels/ops.h (Tn is the sequence length T; HS = C / NH).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/ref/bf16_ref.h"

namespace frugal::kernels::ref {

// The keys j < t that query i attends to, ascending.
inline std::vector<int> visible(const AttentionPattern& pattern, int i, int t) {
  std::vector<int> keys;
  for (int j = 0; j < t; ++j)
    if (pattern.allows(i, j)) keys.push_back(j);
  return keys;
}

// out (HS) = softmax(q · Kᵀ · scale) · V over the rows `keys` of K, V (rows ld apart); returns
// the row's log-sum-exp. q (HS). With bf16_p, each unnormalised probability is rounded to bf16
// before it weights V (the bf16 forward's P·V); the sum that normalises them is not.
template <class T>
T attend(T* out, const T* q, const T* k, const T* v, size_t ld, const std::vector<int>& keys,
         int HS, T scale, bool bf16_p = false) {
  std::vector<T> p(keys.size());
  T maxs = -INFINITY;
  for (size_t n = 0; n < keys.size(); ++n) {
    T s = 0;
    for (int d = 0; d < HS; ++d) s += q[d] * k[keys[n] * ld + d];
    p[n] = s * scale;
    maxs = std::max(maxs, p[n]);
  }
  T sum = 0;
  for (T& x : p) sum += (x = std::exp(x - maxs));
  for (int d = 0; d < HS; ++d) out[d] = 0;
  for (size_t n = 0; n < keys.size(); ++n) {
    const T weight = bf16_p ? T(to_f32(to_bf16(float(p[n])))) : p[n];
    for (int d = 0; d < HS; ++d) out[d] += weight / sum * v[keys[n] * ld + d];
  }
  return maxs + std::log(sum);
}

// out (B,Tn,C), lse (B,NH,Tn); qkv (B,Tn,3C) laid out [q | k | v], head h at columns h*HS..h*HS+HS.
// bf16_p as in attend.
template <class T>
void forward_rows(T* out, T* lse, const T* qkv, int B, int Tn, int C, int NH,
                  const AttentionPattern& pattern, bool bf16_p) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tn; ++i) {
      const std::vector<int> keys = visible(pattern, i, pattern.is_causal() ? i + 1 : Tn);
      const T* rows = qkv + static_cast<size_t>(b) * Tn * 3 * C;  // batch b, position 0
      for (int h = 0; h < NH; ++h)
        lse[(static_cast<size_t>(b) * NH + h) * Tn + i] =
            attend(out + (static_cast<size_t>(b) * Tn + i) * C + h * HS,
                   rows + static_cast<size_t>(i) * 3 * C + h * HS, rows + C + h * HS,
                   rows + 2 * C + h * HS, size_t(3) * C, keys, HS, scale, bf16_p);
    }
}

template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int Tn, int C, int NH,
                       const AttentionPattern& pattern) {
  forward_rows(out, lse, qkv, B, Tn, C, NH, pattern, /*bf16_p=*/false);
}

// The forward on bf16 operands (ops.h attention_forward_bf16 where attention_bf16_operands): qkv
// rounded to bf16 in place, then the forward on those values with P rounded to bf16 where it
// weights V, in T's arithmetic.
template <class T>
void attention_forward_bf16(T* out, T* lse, T* qkv, int B, int Tn, int C, int NH,
                            const AttentionPattern& pattern) {
  for (size_t i = 0; i < size_t(B) * Tn * 3 * C; ++i) qkv[i] = T(to_f32(to_bf16(float(qkv[i]))));
  forward_rows(out, lse, qkv, B, Tn, C, NH, pattern, /*bf16_p=*/true);
}

// dqkv (B,Tn,3C) =; dout (B,Tn,C), qkv, out, lse from the forward. With bf16 (the backward after
// attention_forward_bf16): dO is dout rounded to bf16, D_i = dO_i · out_i, and p and ds rounded to
// bf16 where they weight dO, q and k; without it `out` is not read: D_i = Σ_j p_ij dp_ij directly,
// the definition the optimised kernel's rowsum(dO_i ∘ O_i) must agree with.
template <class T>
void backward_rows(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int Tn, int C, int NH,
                   const AttentionPattern& pattern, bool bf16) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  auto rounded = [&](T x) { return bf16 ? T(to_f32(to_bf16(float(x)))) : x; };
  std::fill(dqkv, dqkv + static_cast<size_t>(B) * Tn * 3 * C, T(0));
  std::vector<T> p(Tn), dp(Tn), dO(HS);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < Tn; ++i) {
        const std::vector<int> keys = visible(pattern, i, pattern.is_causal() ? i + 1 : Tn);
        const size_t qi = (static_cast<size_t>(b) * Tn + i) * 3 * C + h * HS;
        const size_t oi = (static_cast<size_t>(b) * Tn + i) * C + h * HS;
        const T* q = qkv + qi;
        for (int d = 0; d < HS; ++d) dO[d] = rounded(dout[oi + d]);
        const T L = lse[(static_cast<size_t>(b) * NH + h) * Tn + i];
        T D = 0;
        for (int j : keys) {
          const size_t kj = (static_cast<size_t>(b) * Tn + j) * 3 * C + h * HS;
          T s = 0, dpj = 0;
          for (int d = 0; d < HS; ++d) {
            s += q[d] * qkv[kj + C + d];
            dpj += dO[d] * qkv[kj + 2 * C + d];
          }
          p[j] = std::exp(s * scale - L);
          dp[j] = dpj;
          if (!bf16) D += p[j] * dpj;
        }
        for (int d = 0; d < HS && bf16; ++d) D += dO[d] * out[oi + d];
        for (int j : keys) {
          const size_t kj = (static_cast<size_t>(b) * Tn + j) * 3 * C + h * HS;
          const T ds = rounded(p[j] * (dp[j] - D) * scale), pj = rounded(p[j]);  // d loss / d (q·k)
          for (int d = 0; d < HS; ++d) {
            dqkv[qi + d] += ds * qkv[kj + C + d];
            dqkv[kj + C + d] += ds * q[d];
            dqkv[kj + 2 * C + d] += pj * dO[d];
          }
        }
      }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int Tn, int C,
                        int NH, const AttentionPattern& pattern) {
  backward_rows(dqkv, dout, qkv, out, lse, B, Tn, C, NH, pattern, /*bf16=*/false);
}

// The backward after attention_forward_bf16 (ops.h attention_backward_bf16 where
// attention_bf16_operands): backward_rows with bf16, in T's arithmetic.
template <class T>
void attention_backward_bf16(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int Tn,
                             int C, int NH, const AttentionPattern& pattern) {
  backward_rows(dqkv, dout, qkv, out, lse, B, Tn, C, NH, pattern, /*bf16=*/true);
}

// out (C); q (C), k_cache (t,C), v_cache (t,C): the query at position t - 1 against the cached
// positions it may see.
template <class T>
void attention_decode(T* out, const T* q, const T* k_cache, const T* v_cache, int t, int C, int NH,
                      const AttentionPattern& pattern) {
  const int HS = C / NH;
  const T scale = T(1) / std::sqrt(T(HS));
  const std::vector<int> keys = visible(pattern, t - 1, t);
  for (int h = 0; h < NH; ++h)
    attend(out + h * HS, q + h * HS, k_cache + h * HS, v_cache + h * HS, size_t(C), keys, HS,
           scale);
}

}  // namespace frugal::kernels::ref
