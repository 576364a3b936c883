// Naive reference kernels: the test oracle for kernels/cpu/. Obviously-correct scalar loops,
// templated on the scalar type so gradient checks can run in fp64. Never optimised.
// Signatures and accumulation rules mirror kernels/ops.h (attention: ref/attention_ref.h).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal::kernels::ref {

template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* e = wte + static_cast<size_t>(tokens[b * Tn + t]) * C;
      const T* p = wpe + static_cast<size_t>(t) * C;
      T* o = out + (static_cast<size_t>(b) * Tn + t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                      int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* d = dout + (static_cast<size_t>(b) * Tn + t) * C;
      for (int c = 0; c < C; ++c) {
        if (dwte) dwte[static_cast<size_t>(tokens[b * Tn + t]) * C + c] += d[c];
        if (dwpe) dwpe[static_cast<size_t>(t) * C + c] += d[c];
      }
    }
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* bias, int N,
                       int C, T eps) {
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    T m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const T s = T(1) / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c)
      out[static_cast<size_t>(i) * C + c] = (x[c] - m) * s * w[c] + (bias ? bias[c] : T(0));
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    const T* d = dout + static_cast<size_t>(i) * C;
    T mean_dn = 0, mean_dn_xhat = 0;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      const T dn = d[c] * w[c];
      mean_dn += dn;
      mean_dn_xhat += dn * xhat;
    }
    mean_dn /= C;
    mean_dn_xhat /= C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mean[i]) * rstd[i];
      if (dbias) dbias[c] += d[c];
      if (dw) dw[c] += d[c] * xhat;
      if (dinp)
        dinp[static_cast<size_t>(i) * C + c] += (d[c] * w[c] - mean_dn - xhat * mean_dn_xhat) * rstd[i];
    }
  }
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      T acc = bias ? bias[o] : T(0);
      for (int c = 0; c < C; ++c) acc += inp[static_cast<size_t>(i) * C + c] * w[static_cast<size_t>(o) * C + c];
      out[static_cast<size_t>(i) * OC + o] = acc;
    }
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC, bool accumulate_dinp) {
  for (int i = 0; i < N; ++i) {
    const T* d = dout + static_cast<size_t>(i) * OC;
    if (dinp)
      for (int c = 0; c < C; ++c) {
        T acc = 0;
        for (int o = 0; o < OC; ++o) acc += d[o] * w[static_cast<size_t>(o) * C + c];
        T& dst = dinp[static_cast<size_t>(i) * C + c];
        dst = accumulate_dinp ? dst + acc : acc;
      }
    for (int o = 0; o < OC; ++o) {
      if (dbias) dbias[o] += d[o];
      if (dw)
        for (int c = 0; c < C; ++c) dw[static_cast<size_t>(o) * C + c] += d[o] * inp[static_cast<size_t>(i) * C + c];
    }
  }
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))
template <class T>
T gelu(T x) {
  const T k = std::sqrt(T(2) / T(M_PI));
  return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
}
template <class T>
T gelu_grad(T x) {
  const T k = std::sqrt(T(2) / T(M_PI));
  const T u = k * (x + T(0.044715) * x * x * x);
  const T th = std::tanh(u);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * T(0.044715) * x * x);
}
template <class T>
T silu(T x) { return x / (T(1) + std::exp(-x)); }
template <class T>
T silu_grad(T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}
template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad(inp[i]);
}

// act: 0 = gelu (GEGLU), 1 = silu (SwiGLU)
template <class T>
void gated_forward(T* out, const T* gate, const T* up, size_t n, int act) {
  for (size_t i = 0; i < n; ++i) out[i] = (act == 0 ? gelu(gate[i]) : silu(gate[i])) * up[i];
}
template <class T>
void gated_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n,
                    int act) {
  for (size_t i = 0; i < n; ++i) {
    const T a = act == 0 ? gelu(gate[i]) : silu(gate[i]);
    const T da = act == 0 ? gelu_grad(gate[i]) : silu_grad(gate[i]);
    dgate[i] = dout[i] * up[i] * da;
    dup[i] = dout[i] * a;
  }
}

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

// AdamW with decoupled decay, PyTorch semantics.
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, size_t n, T lr, T b1, T b2, T eps, T wd,
                  int64_t t, bool decay) {
  const T c1 = T(1) - std::pow(b1, static_cast<T>(t));
  const T c2 = T(1) - std::pow(b2, static_cast<T>(t));
  for (size_t i = 0; i < n; ++i) {
    if (decay) p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }
}

}  // namespace frugal::kernels::ref
