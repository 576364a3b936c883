// The machine's practical peak for benchmarks and MFU: the engine SGEMM (kernels/cpu/gemm.h), so
// kernel timings can be reported next to the SGEMM rate measured in the same run, and the
// measured GEMM peak itself.
#pragma once

namespace frugal::kernels::cpu {

// C (M,N) = A (M,K) · B (K,N), row-major, on the current thread count.
void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

// Best-of-several single-precision GEMM rate of this machine with the current thread count, in
// FLOP/s: the MFU denominator ("measured peak"). Takes about a second.
double measure_gemm_peak_flops();

}  // namespace frugal::kernels::cpu
