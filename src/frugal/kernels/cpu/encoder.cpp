// The token + position embedding on CPU, forward and backward: AVX2 over 8 channels (C is a
// multiple of 8, ModelConfig::validate guarantees it), OpenMP over rows forward and over channel
// slices backward, so the gradient scatter-add has no races and a fixed order.
#include <algorithm>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C) {
  FRUGAL_PROFILE("embedding fwd");
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const float* e = wte + static_cast<size_t>(tokens[bt]) * C;
    float* o = out + static_cast<size_t>(bt) * C;
    if (!wpe) {
      std::copy_n(e, C, o);
      continue;
    }
    const float* p = wpe + static_cast<size_t>(bt % T) * C;
    for (int c = 0; c < C; c += 8)
      _mm256_storeu_ps(o + c, _mm256_add_ps(_mm256_loadu_ps(e + c), _mm256_loadu_ps(p + c)));
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C) {
  FRUGAL_PROFILE("embedding bwd");
  // Threads own disjoint channel slices, so the scatter-add into dwte has no races and a fixed order.
  const int slices = C / 8;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < slices; ++s) {
    const int c = s * 8;
    for (int bt = 0; bt < B * T; ++bt) {
      const __m256 d = _mm256_loadu_ps(dout + static_cast<size_t>(bt) * C + c);
      if (dwte) {
        float* w = dwte + static_cast<size_t>(tokens[bt]) * C + c;
        _mm256_storeu_ps(w, _mm256_add_ps(_mm256_loadu_ps(w), d));
      }
      if (dwpe) {
        float* p = dwpe + static_cast<size_t>(bt % T) * C + c;
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), d));
      }
    }
  }
}

}  // namespace

const EncoderKernels encoder_avx2{&encoder_forward, &encoder_backward};

}  // namespace frugal::kernels::cpu
