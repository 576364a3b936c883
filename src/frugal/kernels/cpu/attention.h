// Fused attention on CPU: the per-instruction-set tile loops (attention_avx2.cpp,
// attention_avx512.cpp), which attention.cpp wraps into the family's kernel tables
// (kernels/cpu/cpu_backend.h), the AVX-512 forward and backward on bf16 with AVX512_BF16's dot products
// (attention_avx512bf16.cpp), and the one-query decode kernel (attention_decode.cpp). Results are
// deterministic per instruction set and thread count; the two instruction sets differ in the last
// bits (different register blocking, same tolerances).
#pragma once
#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/cpu/cpu_backend.h"

namespace frugal::kernels {
namespace attention_detail {

// qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T), and out16 (B,T,C) = out in bf16 unless null; see
// attention_forward(_bf16) in kernels/ops.h.
using ForwardFn = void (*)(float* out, bf16* out16, float* lse, const float* qkv, int B, int T, int C, int NH,
                           const AttentionPattern& pattern);
// attention_forward_bf16 of kernels/ops.h: qkv rounded to bf16 in place, the products on bf16.
using ForwardBf16Fn = void (*)(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C, int NH,
                               const AttentionPattern& pattern);
// dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T) -> dqkv (B,T,3C), overwritten.
using BackwardFn = void (*)(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int B, int T, int C, int NH,
                            const AttentionPattern& pattern);

struct IsaKernels {
  ForwardFn forward;
  ForwardBf16Fn forward_bf16;
  BackwardFn backward;
  BackwardFn backward_bf16;  // attention_backward_bf16 of kernels/ops.h
};

const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();  // call only when isa_available(Isa::Avx512)
// The AVX-512 forward and backward on bf16 with vdpbf16ps (attention_avx512bf16.cpp): call only
// when the CPU has AVX512_BF16 as well.
ForwardBf16Fn avx512bf16_forward_bf16();
BackwardFn avx512bf16_backward_bf16();

}  // namespace attention_detail

namespace cpu {

// attention_decode of kernels/ops.h with AVX2/FMA: both optimised paths run it.
void attention_decode_avx2(float* out, const float* q, const float* k_cache, const float* v_cache,
                           int t, int C, int NH, const AttentionPattern& pattern);

}  // namespace cpu
}  // namespace frugal::kernels
