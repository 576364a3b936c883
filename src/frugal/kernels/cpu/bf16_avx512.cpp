// The bf16 family's AVX-512 table: the conversion loops (bf16_convert.h) compiled for AVX-512, the
// GEMMs of bf16.cpp.
#pragma GCC target("avx512f,avx512bw,avx512vl")
#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/bf16_convert.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"

namespace frugal::kernels::cpu {

const Bf16Kernels bf16_avx512{&f32_to_bf16_loop,           &round_to_bf16_loop,  &bf16_to_f32_loop,
                              &f32_to_bf16_bias_grad_loop, &matmul_bf16_forward, &matmul_bf16_backward,
                              &onednn_bf16_matmul_isa};

}  // namespace frugal::kernels::cpu
