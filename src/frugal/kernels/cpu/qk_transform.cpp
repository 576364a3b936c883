// QK-norm and rotary position embeddings on CPU (ops.h section qk_transform). The rotary angles'
// cosines and sines are tabled once per call ((T, HS/2) each, from the angle in double), the rows
// split over threads, and each head's loops are plain float loops the compiler vectorises (sums of
// squares in float lanes). One table serves the AVX2 and AVX-512 paths: the work is a few FLOPs per
// element next to the qkv projection's 2·C per element.
#include <cmath>
#include <vector>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

// cos and sin (T, HS/2) of the angles (pos0 + t) · base^(-2i/HS).
struct RotaryTable {
  int half = 0;
  std::vector<float> cos, sin;
  RotaryTable(int T, int pos0, int HS, float base) : half(HS / 2), cos(size_t(T) * half), sin(cos.size()) {
    for (int i = 0; i < half; ++i) {
      const double frequency = std::pow(double(base), -2.0 * i / HS);
      for (int t = 0; t < T; ++t) {
        const double angle = double(pos0 + t) * frequency;
        cos[size_t(t) * half + i] = static_cast<float>(std::cos(angle));
        sin[size_t(t) * half + i] = static_cast<float>(std::sin(angle));
      }
    }
  }
  // x (2·half) turned by the angles of position t, forwards (sign 1) or backwards (sign -1).
  void rotate(float* x, int t, float sign) const {
    const float* c = cos.data() + size_t(t) * half;
    const float* s = sin.data() + size_t(t) * half;
    float* x1 = x + half;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const float a = x[i], b = x1[i], si = sign * s[i];
      x[i] = a * c[i] - b * si;
      x1[i] = a * si + b * c[i];
    }
  }
};

float sum_squares(const float* x, int n) {
  float total = 0;
#pragma omp simd reduction(+ : total)
  for (int i = 0; i < n; ++i) total += x[i] * x[i];
  return total;
}

void qk_transform_forward(float* qkv, float* inv_rms, int B, int T, int pos0, int C, int NH, const QkTransform& t) {
  if (!t.any()) return;
  FRUGAL_PROFILE("qk transform");
  const int HS = C / NH;
  const RotaryTable table(t.rotary ? T : 0, pos0, HS, t.rope_base);
#pragma omp parallel for schedule(static)
  for (int row = 0; row < B * T; ++row) {
    const int s = row % T;
    for (int head = 0; head < 2 * NH; ++head) {  // the query heads, then the key heads
      float* x = qkv + size_t(row) * 3 * C + size_t(head) * HS;
      if (t.norm) {
        const float r = 1.0f / std::sqrt(sum_squares(x, HS) / HS + kQkNormEps);
#pragma omp simd
        for (int i = 0; i < HS; ++i) x[i] *= r;
        inv_rms[size_t(row) * 2 * NH + head] = r;
      }
      if (t.rotary) table.rotate(x, s, 1.0f);
    }
  }
}

void qk_transform_backward(float* dqkv, const float* qkv, const float* inv_rms, int B, int T, int C, int NH,
                           const QkTransform& t) {
  if (!t.any()) return;
  FRUGAL_PROFILE("qk transform");
  const int HS = C / NH;
  const RotaryTable table(t.rotary ? T : 0, 0, HS, t.rope_base);
#pragma omp parallel
  {
    std::vector<float> y(HS);
#pragma omp for schedule(static)
    for (int row = 0; row < B * T; ++row) {
      const int s = row % T;
      for (int head = 0; head < 2 * NH; ++head) {
        const size_t at = size_t(row) * 3 * C + size_t(head) * HS;
        float* d = dqkv + at;
        if (t.rotary) table.rotate(d, s, -1.0f);
        if (!t.norm) continue;
        std::copy(qkv + at, qkv + at + HS, y.begin());
        if (t.rotary) table.rotate(y.data(), s, -1.0f);
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < HS; ++i) dot += d[i] * y[i];
        const float r = inv_rms[size_t(row) * 2 * NH + head], mean = dot / HS;
#pragma omp simd
        for (int i = 0; i < HS; ++i) d[i] = r * (d[i] - y[i] * mean);
      }
    }
  }
}

}  // namespace

const QkTransformKernels qk_transform_avx2{&qk_transform_forward, &qk_transform_backward};

}  // namespace frugal::kernels::cpu
