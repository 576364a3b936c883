// Muon's Newton–Schulz orthogonalisation on CPU (ops.h section newton_schulz): each iteration is
// three products through the GEMM entry points (kernels/cpu/gemm.h), on the Gram matrix of the
// short side, so a tall matrix is never transposed:
//   wide (R ≤ C): A = X·Xᵀ, B = b·A + c·A·A, X ← a·X + B·X
//   tall (R > C): A = Xᵀ·X, B = b·A + c·A·A, X ← a·X + X·B   (the same iteration on Xᵀ; B is symmetric)
// A and A·A = A·Aᵀ are symmetric: ssyrk computes them at half an SGEMM's FLOPs, so an iteration
// costs 3·m²·n + m³ FLOPs for m = min(R,C), n = max(R,C) (as three SGEMMs: 4·m²·n + 2·m³).
// The bf16 variant runs the three products through gemm_bf16 (bf16.h) as general products on x, A
// and B rounded to bf16 (A·A is its own product there, then B = b·A + c·A·A in fp32), twice the FMA
// rate where the CPU computes bf16.
#include <cmath>
#include <cstring>
#include <vector>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/bf16_convert.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"

namespace frugal::kernels::cpu {
namespace {

// x (n) /= ‖x‖_F + 1e-7, the norm summed in double.
void normalise(float* x, size_t n) {
  double squares = 0;
  for (size_t i = 0; i < n; ++i) squares += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / (std::sqrt(squares) + 1e-7));
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

// The frame both variants share: x normalised, then `steps` times iterate(X, Y, A, B, tall, m)
// writes the next iterate of X (R,C) into Y, with A and B (m,m) scratch for the Gram matrix and the
// polynomial, m = min(R,C), tall = R > C; the result ends in x.
template <class Iterate>
void orthogonalise(float* x, int R, int C, int steps, Iterate&& iterate) {
  const size_t n_all = size_t(R) * C;
  normalise(x, n_all);
  if (steps == 0) return;
  const bool tall = R > C;
  const int m = tall ? C : R;
  thread_local std::vector<float> y, gram, poly;
  y.resize(n_all);
  gram.resize(size_t(m) * m);
  poly.resize(gram.size());
  float *X = x, *Y = y.data();
  for (int s = 0; s < steps; ++s) {
    iterate(X, Y, gram.data(), poly.data(), tall, m);
    std::swap(X, Y);
  }
  if (X != x) std::memcpy(x, X, sizeof(float) * n_all);
}

void newton_schulz(float* x, int R, int C, int steps) {
  FRUGAL_PROFILE("newton_schulz");
  orthogonalise(x, R, C, steps, [R, C](const float* X, float* Y, float* A, float* B, bool tall, int m) {
    if (tall)
      ssyrk(true, m, R, 1.0f, X, C, 0.0f, A, m);  // A (m,m) = Xᵀ·X
    else
      ssyrk(false, m, C, 1.0f, X, C, 0.0f, A, m);  // A (m,m) = X·Xᵀ
    std::memcpy(B, A, sizeof(float) * m * m);
    ssyrk(false, m, m, kNewtonSchulzC, A, m, kNewtonSchulzB, B, m);  // B = b·A + c·A·Aᵀ (= c·A·A)
    std::memcpy(Y, X, sizeof(float) * R * C);
    if (tall)
      sgemm(false, false, R, C, m, 1.0f, X, C, B, m, kNewtonSchulzA, Y, C);  // Y (R,C) = a·X + X·B
    else
      sgemm(false, false, m, C, m, 1.0f, B, m, X, C, kNewtonSchulzA, Y, C);  // Y (R,C) = a·X + B·X
  });
}

void newton_schulz_bf16(float* x, int R, int C, int steps) {
  FRUGAL_PROFILE("newton_schulz bf16");
  orthogonalise(x, R, C, steps, [R, C](const float* X, float* Y, float* A, float* B, bool tall, int m) {
    const size_t n_all = size_t(R) * C, n_gram = size_t(m) * m;
    thread_local std::vector<bf16> x16, gram16, poly16;  // the products' operands
    x16.resize(n_all);
    gram16.resize(n_gram);
    poly16.resize(n_gram);
    f32_to_bf16_loop(x16.data(), X, n_all);
    if (tall)
      gemm_bf16(true, false, m, m, R, x16.data(), C, x16.data(), C, false, A, m);  // A (m,m) = Xᵀ·X
    else
      gemm_bf16(false, true, m, m, C, x16.data(), C, x16.data(), C, false, A, m);  // A (m,m) = X·Xᵀ
    f32_to_bf16_loop(gram16.data(), A, n_gram);
    gemm_bf16(false, false, m, m, m, gram16.data(), m, gram16.data(), m, false, B, m);  // B = A·A
    for (size_t i = 0; i < n_gram; ++i) B[i] = kNewtonSchulzB * A[i] + kNewtonSchulzC * B[i];
    f32_to_bf16_loop(poly16.data(), B, n_gram);
    if (tall)
      gemm_bf16(false, false, R, C, m, x16.data(), C, poly16.data(), m, false, Y, C);  // Y (R,C) = X·B
    else
      gemm_bf16(false, false, m, C, m, poly16.data(), m, x16.data(), C, false, Y, C);  // Y (R,C) = B·X
    for (size_t i = 0; i < n_all; ++i) Y[i] += kNewtonSchulzA * X[i];
  });
}

}  // namespace

const NewtonSchulzKernels newton_schulz_avx2{&newton_schulz, &newton_schulz_bf16};

}  // namespace frugal::kernels::cpu
