// The one dense SGEMM entry point of the CPU kernels (row-major):
//   C (M,N) = alpha · op(A) · op(B) + beta · C,  op(X) = X or Xᵀ.
// Two well-kept libraries can back it: oneDNN (default when the build found it: measured faster
// on most of the training step's shapes, see docs/performance.md) and OpenBLAS (OpenMP build).
// oneDNN has two paths, chosen per shape: dnnl_sgemm, and a matmul primitive created once per
// shape for C = A·Bᵀ with K ≥ N (where dnnl_sgemm is slow).
// FRUGAL_GEMM=onednn|openblas in the environment overrides the default at start-up.
#pragma once
#include <string>

#include "frugal/kernels/dtype.h"

namespace frugal::kernels::cpu {

enum class GemmBackend { OpenBLAS, OneDNN };

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// The symmetric product C (N,N) = alpha · op(A)·op(A)ᵀ + beta · C, op(A) = A (N,K), or Aᵀ for A
// (K,N) when trans: half the FLOPs of the same product through sgemm. OpenBLAS's ssyrk computes
// the upper triangle (oneDNN has no such routine), which is then mirrored: both triangles of C
// are written, and beta · C reads C's upper triangle only.
void ssyrk(bool trans, int N, int K, float alpha, const float* A, int lda, float beta, float* C, int ldc);

// Whether this build has oneDNN (the build found libdnnl-dev).
bool onednn_available();

// oneDNN's two paths, which sgemm chooses between, for bench_matmul. Both throw Error in a build
// without oneDNN. onednn_matmul computes C = op(A)·op(B) (+ bias, N floats added to every row,
// when not null) (+ C when accumulate).
void onednn_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);
void onednn_matmul(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                   int ldb, const float* bias, bool accumulate, float* C, int ldc);

// oneDNN's matmul on bf16 operands: C (M,N) fp32 = op(A)·op(B) (+ bias, fp32) (+ C when
// accumulate), sums in fp32. onednn_bf16_matmul_isa() names the instruction set of its JIT kernel
// here ("avx512_core_bf16", "avx512_core_amx", or "avx512_core", which converts), and is empty when
// there is none (no oneDNN, FRUGAL_GEMM=openblas, an AVX2 CPU or FRUGAL_ISA=avx2): then
// onednn_matmul_bf16 must not be called.
std::string onednn_bf16_matmul_isa();
void onednn_matmul_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B,
                        int ldb, const float* bias, bool accumulate, float* C, int ldc);

// The forward of a linear layer: C (M,N) = A (M,K) · B (N,K)ᵀ + bias (N floats added to every row;
// null: none). The matmul primitive adds the bias in its epilogue; otherwise the bias is broadcast
// into C and sgemm adds to it.
void gemm_nt_bias(int M, int N, int K, const float* A, const float* B, const float* bias, float* C);

GemmBackend gemm_backend();
// Throws Error when OneDNN is requested but frugal was built without it.
void set_gemm_backend(GemmBackend backend);
const char* gemm_backend_name(GemmBackend backend);

}  // namespace frugal::kernels::cpu
