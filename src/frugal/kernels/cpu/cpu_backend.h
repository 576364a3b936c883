// The CPU backend's kernel tables (kernels/dispatch.h), one per family and instruction set, each
// defined beside its kernels: the optimised ones in kernels/cpu/X*.cpp, the naive references of
// kernels/ref/ in float in kernels/cpu/ref_kernels.cpp. cpu_backend.cpp gathers them into the
// KernelTables of each instruction set. The families without an AVX-512 variant run their AVX2
// table on the AVX-512 path too.
#pragma once
#include "frugal/kernels/dispatch.h"

namespace frugal::kernels::cpu {

extern const EncoderKernels encoder_avx2, encoder_ref;
extern const LayernormKernels layernorm_avx2, layernorm_ref;
extern const MatmulKernels matmul_avx2, matmul_ref;
extern const Bf16Kernels bf16_avx2, bf16_avx512, bf16_ref;
extern const Sparse24Kernels sparse24_avx2, sparse24_avx512, sparse24_ref;
extern const SparseLinearKernels sparse_linear_avx2, sparse_linear_avx512, sparse_linear_ref;
extern const AttentionKernels attention_avx2, attention_avx512, attention_ref;
extern const ActivationsKernels activations_avx2, activations_ref;
extern const ElementwiseKernels elementwise_avx2, elementwise_ref;
extern const LmHeadKernels lm_head_avx2, lm_head_ref;
extern const AdamwKernels adamw_avx2, adamw_ref;
extern const MoeKernels moe_avx2, moe_ref;
extern const NewtonSchulzKernels newton_schulz_avx2, newton_schulz_ref;
extern const QkTransformKernels qk_transform_avx2, qk_transform_ref;

}  // namespace frugal::kernels::cpu
