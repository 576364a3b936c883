// The elementwise kernel family (sum of squares, scaling, residual add, dropout) against plain
// loops.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/ops.h"
#include "gradcheck.h"

namespace k = frugal::kernels;
using frugal::testing::random_vector;
using frugal::testing::to_f;

TEST(Kernels, SumSquaresScaleResidualDropout) {
  const size_t n = 100003;
  auto x = to_f(random_vector(n, 21));
  double expect = 0;
  for (float v : x) expect += double(v) * v;
  EXPECT_NEAR(k::sum_squares(x.data(), n), expect, 1e-6 * expect);
  std::vector<float> y = x, y_expect(n);
  k::scale_inplace(y.data(), n, 0.5f);
  for (size_t i = 0; i < n; ++i) y_expect[i] = x[i] * 0.5f;
  EXPECT_EQ(y, y_expect);
  std::vector<float> z(n), z_expect(n);
  k::residual_forward(z.data(), x.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) z_expect[i] = x[i] + y[i];
  EXPECT_EQ(z, z_expect);
  std::vector<float> d(n, 1.0f);
  k::dropout_apply(d.data(), n, 0.25f, 42);
  size_t zeros = 0;
  for (float v : d) {
    if (v == 0.0f) ++zeros;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(double(zeros) / n, 0.25, 0.01);
  std::vector<float> d2(n, 1.0f);
  k::dropout_apply(d2.data(), n, 0.25f, 42);
  EXPECT_EQ(d, d2) << "the mask is a pure function of (key, index)";
}
