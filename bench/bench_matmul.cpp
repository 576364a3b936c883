// bench_matmul: the matmul family's GEMM backends, OpenBLAS (OpenMP build) vs oneDNN sgemm, on the
// GEMM shapes of a GPT training step, interleaved and repeated so both see the same machine load;
// prints the median GFLOP/s of each (2·M·N·K / time) and the ratio. Calls both libraries directly,
// so bench/CMakeLists.txt builds it only when oneDNN is found (frugal uses the winner, oneDNN, by
// default, OpenBLAS without it or with FRUGAL_GEMM=openblas; see kernels/cpu/gemm.h).
// Usage: bench_matmul [threads=2] [repetitions=15]
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Shape {
  const char* what;
  char ta, tb;  // row-major: C (M,N) = op(A) · op(B) + beta · C
  int M, N, K;
  float beta;  // as kernels/cpu/matmul.cpp calls it
};

double seconds_of(const auto& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 15;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  // Preset M (N = B·T = 2048 rows, C = 384, H = 1536) and preset S (N = 768, C = 128, H = 512):
  // forward out = inp · Wᵀ (N,T) added to the broadcast bias (beta 1), input gradient
  // dinp = dout · W (N,N) (beta 0), weight gradient dW += doutᵀ · inp (T,N) (beta 1: it
  // accumulates into the gradient).
  const std::vector<Shape> shapes = {
      {"M qkv fwd", 'N', 'T', 2048, 1152, 384, 1},   {"M fc fwd", 'N', 'T', 2048, 1536, 384, 1},
      {"M proj2 fwd", 'N', 'T', 2048, 384, 1536, 1}, {"M fc dinp", 'N', 'N', 2048, 384, 1536, 0},
      {"M fc dW", 'T', 'N', 1536, 384, 2048, 1},     {"S fc fwd", 'N', 'T', 768, 512, 128, 1},
      {"S fc dinp", 'N', 'N', 768, 128, 512, 0},     {"S fc dW", 'T', 'N', 512, 128, 768, 1},
  };
  std::printf("%-12s %6s %6s %6s %12s %12s %8s\n", "shape", "M", "N", "K", "OpenBLAS", "oneDNN", "ratio");
  for (const Shape& s : shapes) {
    std::vector<float> a(size_t(s.M) * s.K, 0.5f), b(size_t(s.K) * s.N, 0.25f), c(size_t(s.M) * s.N);
    const int lda = s.ta == 'N' ? s.K : s.M, ldb = s.tb == 'N' ? s.N : s.K;
    const auto blas_call = [&] {
      cblas_sgemm(CblasRowMajor, s.ta == 'N' ? CblasNoTrans : CblasTrans,
                  s.tb == 'N' ? CblasNoTrans : CblasTrans, s.M, s.N, s.K, 1.0f, a.data(), lda,
                  b.data(), ldb, s.beta, c.data(), s.N);
    };
    const auto dnnl_call = [&] {
      dnnl_sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N);
    };
    // One untimed call of each per shape: the first call of a shape pays packing buffers and
    // (oneDNN) kernel generation.
    blas_call();
    dnnl_call();
    std::vector<double> blas, dnnl;
    for (int r = 0; r < reps; ++r) {
      blas.push_back(seconds_of(blas_call));
      dnnl.push_back(seconds_of(dnnl_call));
    }
    std::sort(blas.begin(), blas.end());
    std::sort(dnnl.begin(), dnnl.end());
    const double flops = 2.0 * s.M * s.N * s.K;
    const double gb = flops / blas[reps / 2] / 1e9, gd = flops / dnnl[reps / 2] / 1e9;
    std::printf("%-12s %6d %6d %6d %9.1f GF %9.1f GF %7.2fx\n", s.what, s.M, s.N, s.K, gb, gd, gb / gd);
  }
  return 0;
}
