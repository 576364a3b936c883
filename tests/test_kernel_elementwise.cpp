// The elementwise kernel family (sum of squares, scaling, residual add, dropout) against plain
// loops.
#include <gtest/gtest.h>

#include <omp.h>

#include <vector>

#include "frugal/core/error.h"
#include "kernel_test.h"

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

// The sum of squares fed in pieces (how block ranges feed the global gradient norm) is
// bit-identical to one sum_squares over the concatenation: pieces that cut chunks anywhere (at
// multiples of 8), several whole chunks in one piece (the parallel path), an empty piece, a last
// piece that ends inside a group of 8; at 1 and 2 threads.
TEST(Kernels, SumSquaresStreamEqualsOneSumBitForBit) {
  const size_t n = 3 * 40000 + 5;
  const std::vector<float> x = to_f(random_vector(n, 21));
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const double whole = k::sum_squares(x.data(), n);
    for (const std::vector<size_t>& cuts : {std::vector<size_t>{8}, {4096}, {4104, 4104, 50000},
                                            {40000, 80000}, {16, 4000, 4096, 100000}, {n - 5}}) {
      k::SumSquaresStream stream;
      size_t at = 0;
      for (size_t cut : cuts) {
        k::sum_squares_feed(stream, x.data() + at, cut - at);
        at = cut;
      }
      k::sum_squares_feed(stream, x.data() + at, n - at);
      EXPECT_EQ(k::sum_squares_finish(stream), whole) << "threads " << threads << ", first cut " << cuts[0];
    }
  }
  k::SumSquaresStream stream;
  k::sum_squares_feed(stream, x.data(), 13);  // not a multiple of 8: must be the last piece
  EXPECT_THROW(k::sum_squares_feed(stream, x.data(), 8), frugal::Error);
}
