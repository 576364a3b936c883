// The matmul kernel family (the dense linear): the CPU kernels against the naive reference (within
// 1e-5 relative: GEMM summation order differs), the reference backward against fp64 finite
// differences, both of oneDNN's GEMM paths (kernels/cpu/gemm.h) on every transposition, and the
// symmetric product ssyrk.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/ref/matmul_ref.h"
#include "kernel_test.h"

namespace {

// The forward and backward of a linear layer (N rows, C in, OC out) against the reference.
void expect_linear_matches_reference(int N, int C, int OC) {
  auto x = to_f(random_vector(N * C, 5)), w = to_f(random_vector(OC * C, 6)), b = to_f(random_vector(OC, 7));
  auto R = to_f(random_vector(N * OC, 8));
  for (bool with_bias : {false, true}) {
    std::vector<float> o1(N * OC), o2(N * OC);
    k::matmul_forward(o1.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
    ref::matmul_forward(o2.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
    EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5) << "N " << N << " C " << C << " OC " << OC;
  }
  for (bool accumulate : {false, true}) {
    std::vector<float> dx1(N * C, 1.0f), dw1(OC * C, 0.5f), db1(OC, 0.25f), dx2 = dx1, dw2 = dw1, db2 = db1;
    k::matmul_backward(dx1.data(), dw1.data(), db1.data(), R.data(), x.data(), w.data(), N, C, OC, accumulate);
    ref::matmul_backward(dx2.data(), dw2.data(), db2.data(), R.data(), x.data(), w.data(), N, C, OC, accumulate);
    EXPECT_LT(max_rel_error(to_d(dx1), to_d(dx2)), 1e-5) << "N " << N << " C " << C << " OC " << OC;
    EXPECT_LT(max_rel_error(to_d(dw1), to_d(dw2)), 1e-5) << "N " << N << " C " << C << " OC " << OC;
    EXPECT_LT(max_rel_error(to_d(db1), to_d(db2)), 1e-5) << "N " << N << " C " << C << " OC " << OC;
  }
}

}  // namespace

TEST(Kernels, MatmulMatchesReferenceAndGradients) {
  const int N = 5, C = 16, OC = 12;
  auto x = random_vector(N * C, 5), w = random_vector(OC * C, 6), b = random_vector(OC, 7);
  auto R = random_vector(N * OC, 8);
  std::vector<double> out(N * OC);
  auto loss = [&] {
    ref::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, R);
  };
  std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  ref::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC, false);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);
  expect_linear_matches_reference(N, C, OC);
  auto xf = to_f(x), wf = to_f(w), Rf = to_f(R);
  // null gradients are skipped: only dbias requested
  std::vector<float> db3(OC, 0.0f), db4(OC, 0.0f);
  k::matmul_backward(nullptr, nullptr, db3.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  ref::matmul_backward<float>(nullptr, nullptr, db4.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  EXPECT_LT(max_rel_error(to_d(db3), to_d(db4)), 1e-6);
}

// Wide enough (rows ≥ 128, in ≥ out) for the forward to take oneDNN's matmul primitive, with its
// fused bias, and the other way round for dnnl_sgemm.
TEST(Kernels, MatmulMatchesReferenceOnBothGemmPaths) {
  expect_linear_matches_reference(130, 40, 24);
  expect_linear_matches_reference(130, 24, 40);
}

// oneDNN's two paths, on every transposition, overwriting and accumulating, against a naive
// product; strides wider than the matrices.
TEST(Kernels, OneDnnMatmulPrimitiveAndSgemmMatchANaiveProduct) {
  namespace cpu = frugal::kernels::cpu;
  if (!cpu::onednn_available()) GTEST_SKIP() << "built without oneDNN";
  const int M = 37, N = 29, K = 41, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool accumulate : {false, true}) {
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        auto A = to_f(random_vector((ta ? K : M) * lda, 11)), B = to_f(random_vector((tb ? N : K) * ldb, 12));
        auto bias = to_f(random_vector(N, 13)), C0 = to_f(random_vector(M * ldc, 14));
        std::vector<double> expected(M * ldc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < ldc; ++j) {
            double sum = accumulate || j >= N ? C0[i * ldc + j] : 0.0;
            for (int p = 0; p < K && j < N; ++p)
              sum += double(ta ? A[p * lda + i] : A[i * lda + p]) * (tb ? B[j * ldb + p] : B[p * ldb + j]);
            expected[i * ldc + j] = sum;
          }
        auto C1 = C0, C2 = C0, C3 = C0;
        cpu::onednn_sgemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, accumulate ? 1.0f : 0.0f, C1.data(), ldc);
        cpu::onednn_matmul(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, nullptr, accumulate, C2.data(), ldc);
        cpu::onednn_matmul(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, bias.data(), accumulate, C3.data(), ldc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) expected[i * ldc + j] += bias[j];
        EXPECT_LT(max_rel_error(to_d(C3), expected), 1e-5) << "ta " << ta << " tb " << tb << " acc " << accumulate;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) expected[i * ldc + j] -= bias[j];
        EXPECT_LT(max_rel_error(to_d(C1), expected), 1e-5) << "ta " << ta << " tb " << tb << " acc " << accumulate;
        EXPECT_LT(max_rel_error(to_d(C2), expected), 1e-5) << "ta " << ta << " tb " << tb << " acc " << accumulate;
      }
}

// The symmetric product (Newton–Schulz's Gram matrices) against a naive one in fp64, both
// orientations, beta 0 and not, a stride wider than the matrices, and sizes across the mirror's
// 32-wide tiles: both triangles written, the columns beyond N untouched.
TEST(Kernels, SsyrkMatchesANaiveSymmetricProduct) {
  namespace cpu = frugal::kernels::cpu;
  const int K = 23, pad = 3;
  for (int N : {1, 31, 33, 70})
    for (bool trans : {false, true})
      for (float beta : {0.0f, -0.5f}) {
        const int lda = (trans ? N : K) + pad, ldc = N + pad;
        const auto A = to_f(random_vector((trans ? K : N) * lda, 21));
        auto C0 = to_f(random_vector(N * ldc, 22));
        for (int i = 0; i < N; ++i)  // beta · C needs a symmetric C
          for (int j = 0; j < i; ++j) C0[i * ldc + j] = C0[j * ldc + i];
        std::vector<double> expected(N * ldc);
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < ldc; ++j) {
            double sum = j >= N ? C0[i * ldc + j] : beta * double(C0[i * ldc + j]);
            for (int p = 0; p < K && j < N; ++p)
              sum += 0.75 * (trans ? double(A[p * lda + i]) * A[p * lda + j] : double(A[i * lda + p]) * A[j * lda + p]);
            expected[i * ldc + j] = sum;
          }
        auto C = C0;
        cpu::ssyrk(trans, N, K, 0.75f, A.data(), lda, beta, C.data(), ldc);
        EXPECT_LT(max_rel_error(to_d(C), expected), 1e-5) << "N " << N << " trans " << trans << " beta " << beta;
      }
}
