// Naive reference of QK-norm and rotary position embeddings (ops.h section qk_transform): the test
// oracle for kernels/cpu/qk_transform.cpp and the ref path. One head vector at a time, the angle
// computed from its definition at every use; templated on the scalar type so gradient checks run
// in fp64. Never optimised.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "frugal/kernels/ops.h"

namespace frugal::kernels::ref {

// The rotary angle of pair i of a head of size HS at position pos.
template <class T>
T rotary_angle(int pos, int i, int HS, float base) {
  return T(pos) * T(std::pow(double(base), -2.0 * i / HS));
}

// x (HS) turned by +angle (sign 1) or -angle (sign -1) pairwise.
template <class T>
void rotate_head(T* x, int HS, int pos, float base, int sign) {
  const int half = HS / 2;
  for (int i = 0; i < half; ++i) {
    const T a = rotary_angle<T>(pos, i, HS, base);
    const T c = std::cos(a), s = sign * std::sin(a);
    const T x0 = x[i], x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x0 * s + x1 * c;
  }
}

template <class T>
void qk_transform_forward(T* qkv, T* inv_rms, int B, int T_, int pos0, int C, int NH, const QkTransform& t) {
  const int HS = C / NH;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < T_; ++s) {
      const size_t row = size_t(b) * T_ + s;
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < NH; ++h) {
          T* x = qkv + row * 3 * C + size_t(part) * C + size_t(h) * HS;
          if (t.norm) {
            T squares = 0;
            for (int i = 0; i < HS; ++i) squares += x[i] * x[i];
            const T r = T(1) / std::sqrt(squares / HS + T(kQkNormEps));
            for (int i = 0; i < HS; ++i) x[i] *= r;
            inv_rms[row * 2 * NH + size_t(part) * NH + h] = r;
          }
          if (t.rotary) rotate_head(x, HS, pos0 + s, t.rope_base, 1);
        }
    }
}

template <class T>
void qk_transform_backward(T* dqkv, const T* qkv, const T* inv_rms, int B, int T_, int C, int NH,
                           const QkTransform& t) {
  const int HS = C / NH;
  std::vector<T> y(HS);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < T_; ++s) {
      const size_t row = size_t(b) * T_ + s;
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < NH; ++h) {
          const size_t at = row * 3 * C + size_t(part) * C + size_t(h) * HS;
          T* d = dqkv + at;
          if (t.rotary) rotate_head(d, HS, s, t.rope_base, -1);  // the rotation's transpose
          if (!t.norm) continue;
          // y: the normalised head before its rotation; dx = r·(dy − y·mean(dy∘y))
          for (int i = 0; i < HS; ++i) y[i] = qkv[at + i];
          if (t.rotary) rotate_head(y.data(), HS, s, t.rope_base, -1);
          T dot = 0;
          for (int i = 0; i < HS; ++i) dot += d[i] * y[i];
          const T r = inv_rms[row * 2 * NH + size_t(part) * NH + h];
          for (int i = 0; i < HS; ++i) d[i] = r * (d[i] - y[i] * dot / HS);
        }
    }
}

}  // namespace frugal::kernels::ref
