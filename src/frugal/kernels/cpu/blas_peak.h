// Plain OpenBLAS SGEMM for benchmarks: kernel timings are reported next to the SGEMM rate measured
// in the same run (the machine's practical peak). Only kernels/cpu/ may call BLAS.
#pragma once

namespace frugal::kernels::cpu {

// C (M,N) = A (M,K) · B (K,N), row-major, OpenBLAS on the current thread count.
void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

}  // namespace frugal::kernels::cpu
