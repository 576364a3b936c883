// The engine SGEMM (kernels/cpu/gemm.h) for benchmarks: kernel timings are reported next to the SGEMM rate measured
// in the same run (the machine's practical peak).
#pragma once

namespace frugal::kernels::cpu {

// C (M,N) = A (M,K) · B (K,N), row-major, on the current thread count.
void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

}  // namespace frugal::kernels::cpu
