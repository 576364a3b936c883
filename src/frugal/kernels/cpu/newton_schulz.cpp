// Muon's Newton–Schulz orthogonalisation on CPU (ops.h section newton_schulz): each iteration is
// three SGEMMs through the one GEMM entry point (kernels/cpu/gemm.h), on the Gram matrix of the
// short side, so a tall matrix is never transposed:
//   wide (R ≤ C): A = X·Xᵀ, B = b·A + c·A·A, X ← a·X + B·X
//   tall (R > C): A = Xᵀ·X, B = b·A + c·A·A, X ← a·X + X·B   (the same iteration on Xᵀ; B is symmetric)
// FLOPs per iteration, m = min(R,C), n = max(R,C): 4·m²·n + 2·m³.
#include <cmath>
#include <cstring>
#include <vector>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"

namespace frugal::kernels::cpu {
namespace {

void newton_schulz(float* x, int R, int C, int steps) {
  FRUGAL_PROFILE("newton_schulz");
  const size_t n_all = size_t(R) * C;
  double squares = 0;
  for (size_t i = 0; i < n_all; ++i) squares += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / (std::sqrt(squares) + 1e-7));
  for (size_t i = 0; i < n_all; ++i) x[i] *= inv;
  if (steps == 0) return;
  const bool tall = R > C;
  const int m = tall ? C : R;
  thread_local std::vector<float> y, gram, poly;
  y.resize(n_all);
  gram.resize(size_t(m) * m);
  poly.resize(gram.size());
  float *X = x, *Y = y.data(), *A = gram.data(), *B = poly.data();
  for (int s = 0; s < steps; ++s) {
    if (tall)
      sgemm(true, false, m, m, R, 1.0f, X, C, X, C, 0.0f, A, m);  // A (m,m) = Xᵀ·X
    else
      sgemm(false, true, m, m, C, 1.0f, X, C, X, C, 0.0f, A, m);  // A (m,m) = X·Xᵀ
    std::memcpy(B, A, sizeof(float) * gram.size());
    sgemm(false, false, m, m, m, kNewtonSchulzC, A, m, A, m, kNewtonSchulzB, B, m);  // B = b·A + c·A·A
    std::memcpy(Y, X, sizeof(float) * n_all);
    if (tall)
      sgemm(false, false, R, C, m, 1.0f, X, C, B, m, kNewtonSchulzA, Y, C);  // Y (R,C) = a·X + X·B
    else
      sgemm(false, false, m, C, m, 1.0f, B, m, X, C, kNewtonSchulzA, Y, C);  // Y (R,C) = a·X + B·X
    std::swap(X, Y);
  }
  if (X != x) std::memcpy(x, X, sizeof(float) * n_all);
}

}  // namespace

const NewtonSchulzKernels newton_schulz_avx2{&newton_schulz};

}  // namespace frugal::kernels::cpu
