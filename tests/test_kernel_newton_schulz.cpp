// The newton_schulz kernel family (Muon's orthogonalisation): the CPU kernel against the naive
// reference run in fp64, on wide, tall and square matrices and 0 to 5 iterations; and the
// reference itself against the scalar quintic on a matrix whose singular vectors are the axes.
#include <gtest/gtest.h>

#include <cmath>

#include "frugal/kernels/ref/newton_schulz_ref.h"
#include "kernel_test.h"

TEST(Kernels, NewtonSchulzMatchesFp64Reference) {
  struct Shape { int R, C; };
  for (const Shape s : {Shape{7, 19}, Shape{19, 7}, Shape{16, 16}, Shape{48, 144}, Shape{150, 40}}) {
    for (int steps : {0, 1, 5}) {
      const size_t n = size_t(s.R) * s.C;
      std::vector<double> expected = random_vector(n, 31 + s.R, 0.02);
      std::vector<float> got = to_f(expected);
      expected = to_d(got);  // both start from the same floats
      k::newton_schulz(got.data(), s.R, s.C, steps);
      ref::newton_schulz(expected.data(), s.R, s.C, steps);
      const double error = max_error_rel_to_max(got.data(), expected.data(), n);
      EXPECT_LT(error, 2e-5) << s.R << "x" << s.C << ", " << steps << " steps";
    }
  }
}

// diag(s) (3,5) has singular values s on the axes: each iteration maps every s_i through the
// quintic p(t) = a·t + b·t³ + c·t⁵ after the Frobenius normalisation, and leaves the zeros zero.
TEST(Kernels, NewtonSchulzIsTheQuinticOnSingularValues) {
  const double s[3] = {3.0, 1.0, 0.25};
  const double norm = std::sqrt(9.0 + 1.0 + 0.0625) + 1e-7;
  const double a = k::kNewtonSchulzA, b = k::kNewtonSchulzB, c = k::kNewtonSchulzC;
  for (int steps : {1, 5}) {
    std::vector<double> x(15, 0.0);
    for (int i = 0; i < 3; ++i) x[i * 5 + i] = s[i];
    ref::newton_schulz(x.data(), 3, 5, steps);
    for (int i = 0; i < 3; ++i) {
      double t = s[i] / norm;
      for (int it = 0; it < steps; ++it) t = a * t + b * t * t * t + c * t * t * t * t * t;
      for (int j = 0; j < 5; ++j) EXPECT_NEAR(x[i * 5 + j], i == j ? t : 0.0, 1e-12) << i << "," << j;
    }
    if (steps == 5) {  // the iteration pushes every singular value into roughly [0.7, 1.2]
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(x[i * 5 + i] > 0.65 && x[i * 5 + i] < 1.25) << x[i * 5 + i];
    }
  }
}
