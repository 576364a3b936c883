// The bf16 family's GEMMs (ops.h section bf16), shared by its AVX2 and AVX-512 tables, which differ
// only in the conversion loops (bf16_convert.h): bf16.cpp and bf16_avx512.cpp.
#pragma once
#include "frugal/kernels/dtype.h"

namespace frugal::kernels::cpu {

void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C,
                         int OC);
void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                          int N, int C, int OC, bool accumulate_dinp);
// C (M,N) = op(A)·op(B) (+ C when accumulate) on bf16 operands with fp32 sums, row-major, op(X) = X
// or Xᵀ: oneDNN's bf16 matmul where the CPU computes bf16, else an SGEMM on the operands widened to
// float (exact products: the two differ in the order of the sums only). For the kernels outside
// this family that multiply bf16 operands (newton_schulz.cpp).
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
               bool accumulate, float* C, int ldc);

}  // namespace frugal::kernels::cpu
