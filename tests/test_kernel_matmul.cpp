// The matmul kernel family (the dense linear): the CPU kernels against the naive reference (within
// 1e-4 relative: GEMM summation order differs), the reference backward against fp64 finite
// differences.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/ref/matmul_ref.h"
#include "kernel_test.h"

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
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), Rf = to_f(R);
  for (bool with_bias : {false, true}) {
    std::vector<float> o1(N * OC), o2(N * OC);
    k::matmul_forward(o1.data(), xf.data(), wf.data(), with_bias ? bf.data() : nullptr, N, C, OC);
    ref::matmul_forward(o2.data(), xf.data(), wf.data(), with_bias ? bf.data() : nullptr, N, C, OC);
    EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5);
  }
  for (bool accumulate : {false, true}) {
    std::vector<float> dx1(N * C, 1.0f), dw1(OC * C, 0.5f), db1(OC, 0.25f), dx2 = dx1, dw2 = dw1, db2 = db1;
    k::matmul_backward(dx1.data(), dw1.data(), db1.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, accumulate);
    ref::matmul_backward(dx2.data(), dw2.data(), db2.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, accumulate);
    EXPECT_LT(max_rel_error(to_d(dx1), to_d(dx2)), 1e-5);
    EXPECT_LT(max_rel_error(to_d(dw1), to_d(dw2)), 1e-5);
    EXPECT_LT(max_rel_error(to_d(db1), to_d(db2)), 1e-5);
  }
  // null gradients are skipped: only dbias requested
  std::vector<float> db3(OC, 0.0f), db4(OC, 0.0f);
  k::matmul_backward(nullptr, nullptr, db3.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  ref::matmul_backward<float>(nullptr, nullptr, db4.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  EXPECT_LT(max_rel_error(to_d(db3), to_d(db4)), 1e-6);
}
