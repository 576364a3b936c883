// Measured OpenBLAS SGEMM throughput: the machine reference that kernel benchmarks report against.
#pragma once

namespace frugal::kernels::cpu {

// Best GFLOP/s over `reps` timed runs of C (M,N) = A (M,K) · B (K,N) in OpenBLAS (row-major, random
// inputs) on the current thread count; one untimed warm-up run first.
double sgemm_gflops(int M, int N, int K, int reps);

}  // namespace frugal::kernels::cpu
