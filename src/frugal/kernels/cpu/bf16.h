// The bf16 family's GEMMs (ops.h section bf16), shared by its AVX2 and AVX-512 tables, which differ
// only in the conversion loops (bf16_convert.h): bf16.cpp and bf16_avx512.cpp.
#pragma once
#include "frugal/kernels/dtype.h"

namespace frugal::kernels::cpu {

void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C,
                         int OC);
void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                          int N, int C, int OC, bool accumulate_dinp);

}  // namespace frugal::kernels::cpu
