// LayerNorm forward (fp32 and/or bf16 output) and backward on CPU. Rows are independent and split
// over threads; parameter gradients are summed per fixed row chunk and then reduced in chunk
// order, so results are bit-identical for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/elementwise.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int kRowChunk = 32;

// C is a multiple of 8 (ModelConfig::validate guarantees it).
inline float row_sum(const float* x, int C) {
  __m256 acc = _mm256_setzero_ps();
  for (int c = 0; c < C; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + c));
  return hsum256(acc);
}

// The forward writing out (fp32, when not null) and out16 (bf16, when not null) from the same
// fp32 values.
void layernorm_forward_to(bf16* out16, float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps) {
  FRUGAL_PROFILE("layernorm fwd");
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* x = inp + static_cast<size_t>(i) * C;
    float* o = out ? out + static_cast<size_t>(i) * C : nullptr;
    bf16* o16 = out16 ? out16 + static_cast<size_t>(i) * C : nullptr;
    const float m = row_sum(x, C) / C;
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    for (int c = 0; c < C; c += 8) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + c), vm);
      acc = _mm256_fmadd_ps(d, d, acc);
    }
    const float s = 1.0f / std::sqrt(hsum256(acc) / C + eps);
    const __m256 vs = _mm256_set1_ps(s);
    for (int c = 0; c < C; c += 8) {
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
      const __m256 b = bias ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
      const __m256 y = _mm256_fmadd_ps(xhat, _mm256_loadu_ps(weight + c), b);
      if (o) store(o + c, AllLanes{}, y);
      if (o16) store(o16 + c, AllLanes{}, y);
    }
    mean[i] = m;
    rstd[i] = s;
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  layernorm_forward_to(nullptr, out, mean, rstd, inp, weight, bias, N, C, eps);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  FRUGAL_PROFILE("layernorm bwd");
  const int chunks = (N + kRowChunk - 1) / kRowChunk;
  const bool param_grads = dweight || dbias;
  std::vector<float> partial(param_grads ? static_cast<size_t>(chunks) * 2 * C : 0, 0.0f);
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ++ch) {
    float* pw = param_grads ? partial.data() + static_cast<size_t>(ch) * 2 * C : nullptr;
    float* pb = param_grads ? pw + C : nullptr;
    for (int i = ch * kRowChunk; i < std::min(N, (ch + 1) * kRowChunk); ++i) {
      const float* x = inp + static_cast<size_t>(i) * C;
      const float* d = dout + static_cast<size_t>(i) * C;
      const __m256 vm = _mm256_set1_ps(mean[i]), vs = _mm256_set1_ps(rstd[i]);
      __m256 a_dn = _mm256_setzero_ps(), a_dnx = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
        const __m256 dv = _mm256_loadu_ps(d + c);
        const __m256 dn = _mm256_mul_ps(dv, _mm256_loadu_ps(weight + c));
        a_dn = _mm256_add_ps(a_dn, dn);
        a_dnx = _mm256_fmadd_ps(dn, xhat, a_dnx);
        if (pw) {
          _mm256_storeu_ps(pw + c, _mm256_fmadd_ps(dv, xhat, _mm256_loadu_ps(pw + c)));
          _mm256_storeu_ps(pb + c, _mm256_add_ps(dv, _mm256_loadu_ps(pb + c)));
        }
      }
      if (!dinp) continue;
      const __m256 mdn = _mm256_set1_ps(hsum256(a_dn) / C);
      const __m256 mdnx = _mm256_set1_ps(hsum256(a_dnx) / C);
      float* di = dinp + static_cast<size_t>(i) * C;
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
        const __m256 dn = _mm256_mul_ps(_mm256_loadu_ps(d + c), _mm256_loadu_ps(weight + c));
        const __m256 g = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(dn, mdn), _mm256_mul_ps(xhat, mdnx)), vs);
        _mm256_storeu_ps(di + c, _mm256_add_ps(_mm256_loadu_ps(di + c), g));
      }
    }
  }
  if (!param_grads) return;
  for (int ch = 0; ch < chunks; ++ch) {
    const float* pw = partial.data() + static_cast<size_t>(ch) * 2 * C;
    for (int c = 0; c < C; ++c) {
      if (dweight) dweight[c] += pw[c];
      if (dbias) dbias[c] += pw[C + c];
    }
  }
}

}  // namespace

const LayernormKernels layernorm_avx2{&layernorm_forward, &layernorm_backward, &layernorm_forward_to};

}  // namespace frugal::kernels::cpu
