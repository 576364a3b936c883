// The activation kernels on CPU: GELU (tanh form), ReLU² and the gated GEGLU / SwiGLU, forward (fp32
// or bf16 output) and backward, through the shared element-wise loop (cpu/elementwise.h).
#include "frugal/kernels/cpu/simd_math.h"  // first: see its note on <immintrin.h>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/elementwise.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels::cpu {
namespace {

// The forwards write Out = float or bf16 (rounded as it is stored: cpu/elementwise.h).
template <class Out>
void gelu_forward(Out* out, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation fwd");
  for_each8_store(out, n, [&](size_t i, auto m) { return gelu256(load(inp + i, m), nullptr); });
}

void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation bwd");
  for_each8(n, [&](size_t i, auto m) {
    __m256 grad;
    gelu256(load(inp + i, m), &grad);
    store(dinp + i, m, _mm256_mul_ps(load(dout + i, m), grad));
  });
}

template <class Out>
void relu2_forward(Out* out, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation fwd");
  for_each8_store(out, n, [&](size_t i, auto m) {
    const __m256 r = _mm256_max_ps(load(inp + i, m), _mm256_setzero_ps());
    return _mm256_mul_ps(r, r);
  });
}

void relu2_backward(float* dinp, const float* dout, const float* inp, size_t n) {
  FRUGAL_PROFILE("activation bwd");
  const __m256 two = _mm256_set1_ps(2.0f);
  for_each8(n, [&](size_t i, auto m) {
    const __m256 r = _mm256_max_ps(load(inp + i, m), _mm256_setzero_ps());
    store(dinp + i, m, _mm256_mul_ps(load(dout + i, m), _mm256_mul_ps(two, r)));
  });
}

static inline __m256 activation(__m256 x, GateAct act, __m256* grad) {
  return act == GateAct::Gelu ? gelu256(x, grad) : silu256(x, grad);
}

template <class Out>
void gated_forward(Out* out, const float* gate, const float* up, size_t n, GateAct act) {
  FRUGAL_PROFILE("activation fwd");
  for_each8_store(out, n, [&](size_t i, auto m) {
    return _mm256_mul_ps(activation(load(gate + i, m), act, nullptr), load(up + i, m));
  });
}

void gated_backward(float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, size_t n, GateAct act) {
  FRUGAL_PROFILE("activation bwd");
  for_each8(n, [&](size_t i, auto m) {
    __m256 grad;
    const __m256 a = activation(load(gate + i, m), act, &grad);
    const __m256 d = load(dout + i, m);
    store(dgate + i, m, _mm256_mul_ps(_mm256_mul_ps(d, load(up + i, m)), grad));
    store(dup + i, m, _mm256_mul_ps(d, a));
  });
}

}  // namespace

const ActivationsKernels activations_avx2{&gelu_forward<float>, &gelu_backward,        &gated_forward<float>,
                                          &gated_backward,       &relu2_forward<float>, &relu2_backward,
                                          &gelu_forward<bf16>,   &relu2_forward<bf16>,  &gated_forward<bf16>};

}  // namespace frugal::kernels::cpu
