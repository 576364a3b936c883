// Naive reference of GELU, ReLU² and the gated activations GEGLU, SwiGLU (ops.h section activations): the
// test oracle for kernels/cpu/. Obviously-correct scalar loops, templated on the scalar type so
// gradient checks can run in fp64. Never optimised. Signatures and accumulation rules mirror
// kernels/ops.h.
#pragma once
#include <cmath>
#include <cstddef>

namespace frugal::kernels::ref {

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

// ReLU²: max(x, 0)², derivative 2·max(x, 0)
template <class T>
void relu2_forward(T* out, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = inp[i] > T(0) ? inp[i] * inp[i] : T(0);
}
template <class T>
void relu2_backward(T* dinp, const T* dout, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) dinp[i] = inp[i] > T(0) ? dout[i] * (T(2) * inp[i]) : T(0);
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

}  // namespace frugal::kernels::ref
