// Naive reference of Muon's Newton–Schulz orthogonalisation (ops.h section newton_schulz): the test
// oracle for kernels/cpu/newton_schulz.cpp and the ref path. Scalar loops, templated on the scalar
// type so tests can run it in fp64 (with the coefficients rounded to float, as the kernel has them),
// with or without the bf16 variant's roundings of the products' operands. Never blocked or reordered.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/bf16_ref.h"

namespace frugal::kernels::ref {

// x (R,C): see kernels::newton_schulz (bf16_operands: kernels::newton_schulz_bf16). Works on the
// wide orientation explicitly: X (m,n) with m = min(R,C) is x or its transpose, copied back at the
// end.
template <class T>
void newton_schulz_rounded(T* x, int R, int C, int steps, bool bf16_operands) {
  // A product's operand: the value itself, or rounded to bf16 (through float) where bf16 is on.
  const auto operand = [bf16_operands](T v) { return bf16_operands ? T(to_f32(to_bf16(float(v)))) : v; };
  const bool tall = R > C;
  const int m = tall ? C : R, n = tall ? R : C;
  std::vector<T> X(size_t(m) * n), Y(X.size()), A(size_t(m) * m), B(A.size());
  T norm = 0;
  for (size_t i = 0; i < X.size(); ++i) norm += x[i] * x[i];
  norm = std::sqrt(norm) + T(1e-7);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      const size_t at = tall ? size_t(j) * n + i : size_t(i) * n + j;
      X[at] = x[size_t(i) * C + j] / norm;
    }
  const T a = kNewtonSchulzA, b = kNewtonSchulzB, c = kNewtonSchulzC;
  std::vector<T> Xo(X.size()), Ao(A.size()), Bo(B.size());  // the products' operands
  const auto operands = [&](const std::vector<T>& from, std::vector<T>& to) {
    for (size_t i = 0; i < from.size(); ++i) to[i] = operand(from[i]);
  };
  // Each product's entry is one sum over k in ascending order; the loops keep a row of those sums
  // and run the innermost loop along contiguous memory (Xᵀ's rows for A = X·Xᵀ).
  std::vector<T> XoT(X.size()), row(n);  // XoT (n,m) = Xoᵀ
  for (int s = 0; s < steps; ++s) {
    operands(X, Xo);
    for (int i = 0; i < m; ++i)
      for (int k = 0; k < n; ++k) XoT[size_t(k) * m + i] = Xo[size_t(i) * n + k];
    for (int i = 0; i < m; ++i) {  // A = X·Xᵀ
      std::fill(row.begin(), row.begin() + m, T(0));
      for (int k = 0; k < n; ++k)
        for (int j = 0; j < m; ++j) row[j] += Xo[size_t(i) * n + k] * XoT[size_t(k) * m + j];
      for (int j = 0; j < m; ++j) A[size_t(i) * m + j] = row[j];
    }
    operands(A, Ao);
    for (int i = 0; i < m; ++i) {  // B = b·A + c·A·A
      std::fill(row.begin(), row.begin() + m, T(0));
      for (int k = 0; k < m; ++k)
        for (int j = 0; j < m; ++j) row[j] += Ao[size_t(i) * m + k] * Ao[size_t(k) * m + j];
      for (int j = 0; j < m; ++j) B[size_t(i) * m + j] = b * A[size_t(i) * m + j] + c * row[j];
    }
    operands(B, Bo);
    for (int i = 0; i < m; ++i) {  // Y = a·X + B·X
      std::fill(row.begin(), row.end(), T(0));
      for (int k = 0; k < m; ++k)
        for (int j = 0; j < n; ++j) row[j] += Bo[size_t(i) * m + k] * Xo[size_t(k) * n + j];
      for (int j = 0; j < n; ++j) Y[size_t(i) * n + j] = a * X[size_t(i) * n + j] + row[j];
    }
    X.swap(Y);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) x[size_t(i) * C + j] = X[tall ? size_t(j) * n + i : size_t(i) * n + j];
}

template <class T>
void newton_schulz(T* x, int R, int C, int steps) {
  newton_schulz_rounded(x, R, C, steps, false);
}
template <class T>
void newton_schulz_bf16(T* x, int R, int C, int steps) {
  newton_schulz_rounded(x, R, C, steps, true);
}

}  // namespace frugal::kernels::ref
