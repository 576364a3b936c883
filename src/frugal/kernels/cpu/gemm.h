// The one dense SGEMM entry point of the CPU kernels (row-major):
//   C (M,N) = alpha · op(A) · op(B) + beta · C,  op(X) = X or Xᵀ.
// Two well-kept libraries can back it: oneDNN (default when the build found it: measured faster
// on most of the training step's shapes, see docs/performance.md) and OpenBLAS (OpenMP build).
// FRUGAL_GEMM=onednn|openblas in the environment overrides the default at start-up.
#pragma once

namespace frugal::kernels::cpu {

enum class GemmBackend { OpenBLAS, OneDNN };

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

GemmBackend gemm_backend();
// Throws Error when OneDNN is requested but frugal was built without it.
void set_gemm_backend(GemmBackend backend);
const char* gemm_backend_name(GemmBackend backend);

}  // namespace frugal::kernels::cpu
