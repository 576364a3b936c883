// The elementwise kernel family (sum of squares, scaling, residual add, dropout) against its naive
// references (kernels/ref/elementwise_ref.h), on the reference path and every optimised one.
#include <gtest/gtest.h>

#include <omp.h>

#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/ref/elementwise_ref.h"
#include "kernel_test.h"

// Scaling, the residual add and dropout give the reference's bits; the sum of squares (chunks of
// 4096 summed in 8 float lanes, ops.h) is within 1e-6 of the reference's in-order sum in double.
// Dropout's mask is a pure function of (key, index): a slice starting at `first` (how a
// tensor-parallel rank drops its columns) is the whole tensor's mask over that slice; it drops about
// p of the elements.
TEST(Kernels, SumSquaresScaleResidualDropoutMatchTheirReferences) {
  const size_t n = 100003;
  const std::vector<float> x = to_f(random_vector(n, 21)), y = to_f(random_vector(n, 22));
  on_every_isa([&] {
    const double expect = ref::sum_squares(x.data(), n);
    EXPECT_NEAR(k::sum_squares(x.data(), n), expect, 1e-6 * expect);
    std::vector<float> scaled = x, scaled_expect = x;
    k::scale_inplace(scaled.data(), n, 0.37f);
    ref::scale_inplace(scaled_expect.data(), n, 0.37f);
    EXPECT_EQ(scaled, scaled_expect);
    std::vector<float> sum(n), sum_expect(n);
    k::residual_forward(sum.data(), x.data(), y.data(), n);
    ref::residual_forward(sum_expect.data(), x.data(), y.data(), n);
    EXPECT_EQ(sum, sum_expect);
    std::vector<float> dropped = x, dropped_expect = x;
    k::dropout_apply(dropped.data(), n, 0.25f, 42);
    ref::dropout_apply(dropped_expect.data(), n, 0.25f, uint64_t{42}, size_t{0});
    EXPECT_EQ(dropped, dropped_expect);
    size_t zeros = 0;
    for (float v : dropped) zeros += v == 0.0f;
    EXPECT_NEAR(double(zeros) / n, 0.25, 0.01);
    const size_t first = 4099, m = 20011;  // a slice that starts and ends inside vectors
    std::vector<float> slice(x.begin() + first, x.begin() + first + m);
    k::dropout_apply(slice.data(), m, 0.25f, 42, first);
    EXPECT_EQ(slice, std::vector<float>(dropped_expect.begin() + first, dropped_expect.begin() + first + m));
  }, true);
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
