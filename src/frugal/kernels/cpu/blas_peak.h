// The machine's peaks for benchmarks and MFU: the engine SGEMM (kernels/cpu/gemm.h), so kernel
// timings can be reported next to the SGEMM rate measured in the same run; the measured GEMM peak
// (the practical peak, MFU's usual denominator); and the FMA peak (the arithmetic ceiling of the
// widest vector unit, which no GEMM reaches).
#pragma once

namespace frugal::kernels::cpu {

// C (M,N) = A (M,K) · B (K,N), row-major, on the current thread count.
void reference_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

// Best-of-several single-precision GEMM rate of this machine with the current thread count, in
// FLOP/s: the MFU denominator ("measured peak"). Takes about a second. With bf16 and a native bf16
// matmul (kernels::bf16_matmul_native()), the rate of the bf16 GEMM (bf16 operands, fp32 sums).
double measure_gemm_peak_flops(bool bf16 = false);

// Rate of single-precision fused multiply-adds on the widest vector registers the CPU has
// (AVX-512 when it has it, else AVX2 + FMA), every thread of the current count running independent
// accumulator chains at once, in FLOP/s (2 per lane per FMA): the sum of each thread's best rate
// per second of its own CPU time, so other load on the machine does not lower it. About 0.1 s.
// With bf16 on a CPU with AVX512_BF16, the same for its bf16 dot products (vdpbf16ps: two
// multiply-adds per fp32 lane).
double measure_fma_peak_flops(bool bf16 = false);
// The instruction set measure_fma_peak_flops(bf16) uses here: "AVX512_BF16", "AVX-512" or "AVX2".
const char* fma_peak_isa(bool bf16 = false);

}  // namespace frugal::kernels::cpu
