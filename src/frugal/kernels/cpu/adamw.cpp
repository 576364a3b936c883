// The fused AdamW update on CPU through the shared element-wise loop (cpu/elementwise.h), writing
// the parameters' bf16 rounding too when given where (a bf16 model's working copy): to nearest, or
// stochastically (kernels/bf16_rounding.h).
#include <cmath>

#include "frugal/core/profile.h"
#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/cpu/elementwise.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

// The update of [0, n), handing each 8-float group's updated p to store16(i, lanes, p).
template <class Store16>
void update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s, bool decay,
            Store16&& store16) {
  FRUGAL_PROFILE("adamw");
  const float c1 = 1.0f / (1.0f - std::pow(s.beta1, static_cast<float>(s.t)));
  const float c2 = 1.0f / (1.0f - std::pow(s.beta2, static_cast<float>(s.t)));
  const __m256 b1 = _mm256_set1_ps(s.beta1), b2 = _mm256_set1_ps(s.beta2);
  const __m256 ob1 = _mm256_set1_ps(1.0f - s.beta1), ob2 = _mm256_set1_ps(1.0f - s.beta2);
  const __m256 vc1 = _mm256_set1_ps(c1), vc2 = _mm256_set1_ps(c2);
  const __m256 eps = _mm256_set1_ps(s.eps), lr = _mm256_set1_ps(s.lr);
  const __m256 keep = _mm256_set1_ps(decay ? 1.0f - s.lr * s.weight_decay : 1.0f);
  const __m256 grad_scale = _mm256_set1_ps(s.grad_scale);
  for_each8(n, [&](size_t i, auto mask) {
    const __m256 gi = _mm256_mul_ps(load(g + i, mask), grad_scale);
    const __m256 mi = _mm256_fmadd_ps(b1, load(m + i, mask), _mm256_mul_ps(ob1, gi));
    const __m256 vi = _mm256_fmadd_ps(b2, load(v + i, mask), _mm256_mul_ps(_mm256_mul_ps(ob2, gi), gi));
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, vc2)), eps);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(mi, vc1), denom);
    const __m256 pi = _mm256_fnmadd_ps(lr, step, _mm256_mul_ps(load(p + i, mask), keep));
    store(m + i, mask, mi);
    store(v + i, mask, vi);
    store(p + i, mask, pi);
    store16(i, mask, pi);
  });
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s, bool decay) {
  update(p, g, m, v, n, s, decay, [](size_t, auto, __m256) {});
}

void adamw_update_bf16(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                       bool decay, const Bf16Rounding& rounding) {
  if (!rounding.stochastic)
    return update(p, g, m, v, n, s, decay, [&](size_t i, auto lanes, __m256 pi) { store(p16 + i, lanes, pi); });
  bf16_rounding::for_each_span(rounding.seed, rounding.first, n, [&](size_t b, size_t e, uint32_t key, uint32_t low) {
    const __m256i k = _mm256_set1_epi32(static_cast<int>(key));
    const __m256i lanes_low =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    update(p + b, g + b, m + b, v + b, e - b, s, decay, [&](size_t i, auto lanes, __m256 pi) {
      const __m256i at = _mm256_add_epi32(lanes_low, _mm256_set1_epi32(static_cast<int>(i)));
      store(p16 + b + i, lanes, round_bf16_stochastic(pi, at, k));
    });
  });
}

}  // namespace

const AdamwKernels adamw_avx2{&adamw_update, &adamw_update_bf16};

}  // namespace frugal::kernels::cpu
