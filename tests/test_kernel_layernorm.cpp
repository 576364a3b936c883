// The layernorm kernel family: the CPU kernels against the naive reference (within 1e-5
// relative), the reference backward against fp64 finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/ref/layernorm_ref.h"
#include "kernel_test.h"

TEST(Kernels, LayerNormMatchesReferenceAndGradients) {
  const int N = 7, C = 24;
  auto x = random_vector(N * C, 1, 2.0), w = random_vector(C, 2), b = random_vector(C, 3);
  auto R = random_vector(N * C, 4);  // loss = Σ out ⊙ R
  // fp64 gradient check of the reference
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(out, R);
  };
  loss();
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);
  // CPU vs reference in float
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), Rf = to_f(R);
  std::vector<float> o1(N * C), m1(N), r1(N), o2(N * C), m2(N), r2(N);
  k::layernorm_forward(o1.data(), m1.data(), r1.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
  ref::layernorm_forward(o2.data(), m2.data(), r2.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
  EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5);
  std::vector<float> dx1(N * C, 0.5f), dw1(C, 0.25f), db1(C, 0.f), dx2 = dx1, dw2 = dw1, db2 = db1;
  k::layernorm_backward(dx1.data(), dw1.data(), db1.data(), Rf.data(), xf.data(), wf.data(), m1.data(), r1.data(), N, C);
  ref::layernorm_backward(dx2.data(), dw2.data(), db2.data(), Rf.data(), xf.data(), wf.data(), m2.data(), r2.data(), N, C);
  EXPECT_LT(max_rel_error(to_d(dx1), to_d(dx2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(dw1), to_d(dw2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(db1), to_d(db2)), 1e-5);
}
