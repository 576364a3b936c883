// The machine's peaks for benchmarks and MFU: the engine SGEMM (kernels/cpu/gemm.h), so kernel
// timings can be reported next to the SGEMM rate measured in the same run; the measured GEMM peak
// (the practical peak, MFU's usual denominator); and the FMA peak (the arithmetic ceiling of the
// widest vector unit, which no GEMM reaches).
#pragma once

namespace frugal::kernels::cpu {

// C (M,N) = A (M,K) · B (K,N), row-major, on the current thread count.
void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

// Best-of-several single-precision GEMM rate of this machine with the current thread count, in
// FLOP/s: the MFU denominator ("measured peak"). Takes about a second.
double measure_gemm_peak_flops();

// Rate of single-precision fused multiply-adds on the widest vector registers the CPU has
// (AVX-512 when it has it, else AVX2 + FMA), every thread of the current count running independent
// accumulator chains at once, in FLOP/s (2 per lane per FMA): the sum of each thread's best rate
// per second of its own CPU time, so other load on the machine does not lower it. About 0.1 s.
double measure_fma_peak_flops();
// The instruction set measure_fma_peak_flops uses here: "AVX-512" or "AVX2".
const char* fma_peak_isa();

}  // namespace frugal::kernels::cpu
