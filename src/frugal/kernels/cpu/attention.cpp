// Fused self-attention on CPU: the family's kernel tables of the AVX2 and AVX-512 paths, which
// profile each call and run that instruction set's tile loops (attention_tiles.h).
#include "frugal/kernels/cpu/attention.h"

#include "frugal/core/profile.h"

namespace frugal::kernels::cpu {
namespace {

using attention_detail::IsaKernels;
using IsaKernelsOf = const IsaKernels& (*)();

template <IsaKernelsOf kernels>
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       const AttentionPattern& pattern) {
  FRUGAL_PROFILE("attention fwd");
  kernels().forward(out, nullptr, lse, qkv, B, T, C, NH, pattern);
}

template <IsaKernelsOf kernels>
void attention_forward_bf16(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C, int NH,
                            const AttentionPattern& pattern) {
  FRUGAL_PROFILE("attention fwd");
  kernels().forward_bf16(out, out16, lse, qkv, B, T, C, NH, pattern);
}

// attention_backward or attention_backward_bf16: the table's entry `backward` names.
template <IsaKernelsOf kernels, attention_detail::BackwardFn IsaKernels::*backward>
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH,
                        const AttentionPattern& pattern) {
  FRUGAL_PROFILE("attention bwd");
  (kernels().*backward)(dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
}

}  // namespace

const AttentionKernels attention_avx2{&attention_forward<&attention_detail::avx2_kernels>,
                                      &attention_forward_bf16<&attention_detail::avx2_kernels>,
                                      &attention_backward<&attention_detail::avx2_kernels, &IsaKernels::backward>,
                                      &attention_backward<&attention_detail::avx2_kernels, &IsaKernels::backward_bf16>,
                                      &attention_decode_avx2};
const AttentionKernels attention_avx512{&attention_forward<&attention_detail::avx512_kernels>,
                                        &attention_forward_bf16<&attention_detail::avx512_kernels>,
                                        &attention_backward<&attention_detail::avx512_kernels, &IsaKernels::backward>,
                                        &attention_backward<&attention_detail::avx512_kernels, &IsaKernels::backward_bf16>,
                                        &attention_decode_avx2};

}  // namespace frugal::kernels::cpu
