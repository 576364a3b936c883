// Fused attention on CPU: instruction-set selection (the kernels themselves are
// attention_forward / attention_backward in kernels/ops.h), and the per-instruction-set entry
// points behind it (attention_avx2.cpp, attention_avx512.cpp).
#pragma once
#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/cpu/isa.h"

namespace frugal::kernels {

// Instruction set of the attention kernels (kernels/cpu/isa.h). Auto: max_isa(). Results are
// deterministic per instruction set and thread count; the two instruction sets differ in the last
// bits (different register blocking, same tolerances).
// Selects the kernels for all later calls (tests and benchmarks compare both); throws when the
// instruction set is not available (isa_available). Returns the instruction set now in use.
Isa attention_set_isa(Isa isa);
Isa attention_active_isa();

namespace attention_detail {

// qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T); see attention_forward in kernels/ops.h.
using ForwardFn = void (*)(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                           const AttentionPattern& pattern);
// dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T) -> dqkv (B,T,3C), overwritten.
using BackwardFn = void (*)(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int B, int T, int C, int NH,
                            const AttentionPattern& pattern);

struct IsaKernels {
  ForwardFn forward;
  BackwardFn backward;
};

const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();  // call only when isa_available(Isa::Avx512)

}  // namespace attention_detail
}  // namespace frugal::kernels
