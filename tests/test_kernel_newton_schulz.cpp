// The newton_schulz kernel family (Muon's orthogonalisation): the CPU kernel against the naive
// reference run in fp64, on wide, tall and square matrices and 0 to 5 iterations; the bf16 variant
// against the reference of its own roundings and against the fp32 kernel; and the reference itself
// against the scalar quintic on a matrix whose singular vectors are the axes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "frugal/kernels/ref/newton_schulz_ref.h"
#include "kernel_test.h"

// Every case: wide, tall and square matrices, 0, 1 and 5 iterations; `check` gets the shape, the
// iterations and the start matrix (random floats).
template <class Check>
void for_each_case(Check&& check) {
  struct Shape { int R, C; };
  for (const Shape s : {Shape{7, 19}, Shape{19, 7}, Shape{16, 16}, Shape{48, 144}, Shape{150, 40}})
    for (int steps : {0, 1, 5}) check(s.R, s.C, steps, to_f(random_vector(size_t(s.R) * s.C, 31 + s.R, 0.02)));
}

TEST(Kernels, NewtonSchulzMatchesFp64Reference) {
  for_each_case([](int R, int C, int steps, std::vector<float> got) {
    std::vector<double> expected = to_d(got);  // both start from the same floats
    k::newton_schulz(got.data(), R, C, steps);
    ref::newton_schulz(expected.data(), R, C, steps);
    EXPECT_LT(max_error_rel_to_max(got.data(), expected.data(), got.size()), 2e-5) << R << "x" << C << ", " << steps
                                                                                     << " steps";
  });
}

// ‖a − b‖_F / ‖b‖_F.
double frobenius_relative(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) diff += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
  return std::sqrt(diff / norm);
}

// The bf16 variant (oneDNN's bf16 matmul where the CPU computes bf16, widened operands elsewhere:
// CI runs both) against the fp64 reference of the same roundings. One iteration from the same
// start: within 1e-3 of the largest element (a sum near a bf16 rounding boundary may round to the
// neighbouring value in one and not the other; measured ≤ 2.8e-4), and at least 3× closer than
// the fp32 kernel is, so the bound tells the two apart. Over 5 iterations the map amplifies such a
// one-ulp difference (its slope is 3.4 near zero), so there the whole matrix is compared:
// within 5% in the Frobenius norm of the reference and of the fp32 kernel's result (Muon's update).
TEST(Kernels, NewtonSchulzBf16MatchesItsReferenceAndStaysCloseToFp32) {
  for_each_case([](int R, int C, int steps, std::vector<float> got) {
    const size_t n = got.size();
    std::vector<double> expected = to_d(got);
    std::vector<float> fp32 = got;
    k::newton_schulz_bf16(got.data(), R, C, steps);
    k::newton_schulz(fp32.data(), R, C, steps);
    ref::newton_schulz_bf16(expected.data(), R, C, steps);
    const double error = max_error_rel_to_max(got.data(), expected.data(), n);
    const double fp32_error = max_error_rel_to_max(fp32.data(), expected.data(), n);
    const double whole = frobenius_relative(got, expected), from_fp32 = frobenius_relative(got, to_d(fp32));
    std::printf("%dx%d, %d steps: bf16 kernel %.2g from its reference (fp32 kernel %.2g); Frobenius %.2g from it, "
                "%.2g from fp32\n", R, C, steps, error, fp32_error, whole, from_fp32);
    const std::string where = std::to_string(R) + "x" + std::to_string(C) + ", " + std::to_string(steps) + " steps";
    if (steps == 0) {  // the normalisation alone: fp32 in both
      EXPECT_LT(error, 2e-6) << where;
    }
    if (steps == 1) {
      EXPECT_LT(error, 1e-3) << where;
      EXPECT_LT(3 * error, fp32_error) << where << ": the bound does not tell bf16 from fp32";
    }
    EXPECT_LT(whole, 5e-2) << where;
    EXPECT_LT(from_fp32, 5e-2) << where;
  });
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
