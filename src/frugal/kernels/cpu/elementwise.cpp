// Element-wise CPU kernels (GELU, gated activations, residual add, dropout, scaling, sum of
// squares, fused AdamW): AVX2 over 8 floats, masked loads for the tail, OpenMP over blocks.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {
namespace {

using namespace cpu;

// Below this many elements a parallel region costs more than it saves.
constexpr size_t kParallelMin = 1 << 15;

inline __m256i tail_mask(size_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), idx);
}

// Calls f(i, mask) for every 8-float group of [0, n); mask selects the valid lanes of the last
// group. Groups are split statically over threads, so results do not depend on scheduling.
template <class F>
void for_each8(size_t n, F&& f) {
  const size_t groups = (n + 7) / 8;
  const __m256i full = _mm256_set1_epi32(-1);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t g = 0; g < groups; ++g) {
    const size_t i = g * 8;
    f(i, n - i >= 8 ? full : tail_mask(n - i));
  }
}

inline __m256 load(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation fwd");
  for_each8(n, [&](size_t i, __m256i m) { store(out + i, m, gelu256(load(inp + i, m), nullptr)); });
}

void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation bwd");
  for_each8(n, [&](size_t i, __m256i m) {
    __m256 grad;
    gelu256(load(inp + i, m), &grad);
    store(dinp + i, m, _mm256_mul_ps(load(dout + i, m), grad));
  });
}

static inline __m256 activation(__m256 x, GateAct act, __m256* grad) {
  return act == GateAct::Gelu ? gelu256(x, grad) : silu256(x, grad);
}

void gated_forward(float* out, const float* gate, const float* up, size_t n, GateAct act) {
  FRUGAL_PROFILE("activation fwd");
  for_each8(n, [&](size_t i, __m256i m) {
    store(out + i, m, _mm256_mul_ps(activation(load(gate + i, m), act, nullptr), load(up + i, m)));
  });
}

void gated_backward(float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, size_t n, GateAct act) {
  FRUGAL_PROFILE("activation bwd");
  for_each8(n, [&](size_t i, __m256i m) {
    __m256 grad;
    const __m256 a = activation(load(gate + i, m), act, &grad);
    const __m256 d = load(dout + i, m);
    store(dgate + i, m, _mm256_mul_ps(_mm256_mul_ps(d, load(up + i, m)), grad));
    store(dup + i, m, _mm256_mul_ps(d, a));
  });
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  FRUGAL_PROFILE("residual");
  for_each8(n, [&](size_t i, __m256i m) { store(out + i, m, _mm256_add_ps(load(a + i, m), load(b + i, m))); });
}

void scale_inplace(float* x, size_t n, float s) {
  FRUGAL_PROFILE("scale");
  const __m256 vs = _mm256_set1_ps(s);
  for_each8(n, [&](size_t i, __m256i m) { store(x + i, m, _mm256_mul_ps(load(x + i, m), vs)); });
}

void dropout_apply(float* x, size_t n, float p, uint64_t key) {
  FRUGAL_PROFILE("dropout");
  if (p <= 0.0f) return;
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) x[i] = uniform_at(key, i) < p ? 0.0f : x[i] * keep_scale;
}

double sum_squares(const float* x, size_t n) {
  FRUGAL_PROFILE("grad norm");
  // Fixed-size chunks summed in float lanes, then combined in double in chunk order: the result
  // is the same for any thread count.
  constexpr size_t kChunk = 4096;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    __m256 acc = _mm256_setzero_ps();
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    double s = hsum256(acc);
    for (; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                  bool decay) {
  FRUGAL_PROFILE("adamw");
  const float c1 = 1.0f / (1.0f - std::pow(s.beta1, static_cast<float>(s.t)));
  const float c2 = 1.0f / (1.0f - std::pow(s.beta2, static_cast<float>(s.t)));
  const __m256 b1 = _mm256_set1_ps(s.beta1), b2 = _mm256_set1_ps(s.beta2);
  const __m256 ob1 = _mm256_set1_ps(1.0f - s.beta1), ob2 = _mm256_set1_ps(1.0f - s.beta2);
  const __m256 vc1 = _mm256_set1_ps(c1), vc2 = _mm256_set1_ps(c2);
  const __m256 eps = _mm256_set1_ps(s.eps), lr = _mm256_set1_ps(s.lr);
  const __m256 keep = _mm256_set1_ps(decay ? 1.0f - s.lr * s.weight_decay : 1.0f);
  for_each8(n, [&](size_t i, __m256i mask) {
    const __m256 gi = load(g + i, mask);
    const __m256 mi = _mm256_fmadd_ps(b1, load(m + i, mask), _mm256_mul_ps(ob1, gi));
    const __m256 vi = _mm256_fmadd_ps(b2, load(v + i, mask), _mm256_mul_ps(_mm256_mul_ps(ob2, gi), gi));
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, vc2)), eps);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(mi, vc1), denom);
    const __m256 pi = _mm256_fnmadd_ps(lr, step, _mm256_mul_ps(load(p + i, mask), keep));
    store(m + i, mask, mi);
    store(v + i, mask, vi);
    store(p + i, mask, pi);
  });
}

}  // namespace frugal::kernels
