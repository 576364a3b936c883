// Unstructured sparse linear kernels against the fp64 reference: forward (bias on/off), input
// gradient (accumulate on/off) and weight gradient (accumulating, untouched outside the mask), on
// odd shapes (N not a multiple of the 64-token panel, OC and IC not multiples of 16) at densities
// 0 to 1, empty rows and columns, both instruction sets, 1 vs 2 threads bit-equal, refresh after a
// value change and re-pack after a mask change.
//
// Tolerance: every output is a sum of K products of unit normals computed in fp32 (K = IC for the
// forward, OC for the input gradient, N for the weight gradient), whose rounding error grows like
// sqrt(K) · 2^-24 · (a few); the error is compared with the scale sqrt(K) of the sum itself, and
// 1e-5 leaves a wide margin over fp32 rounding while any wrong or missing term (size ~1) fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/sparse_linear.h"
#include "frugal/kernels/ref/sparse_linear_ref.h"
#include "gradcheck.h"
#include "optimised_kernels.h"

using namespace frugal;
using namespace frugal::kernels;
using frugal::testing::max_scaled_error;
using frugal::testing::random_normal_floats;
using frugal::testing::to_d;

const auto* const optimised_kernels = frugal::testing::register_optimised_kernels();

namespace {


// Each entry kept with probability `density` (0 and 1 exactly all or none).
std::vector<uint8_t> random_mask(size_t n, double density, uint64_t seed) {
  Rng rng(seed, 2);
  std::vector<uint8_t> m(n);
  for (auto& x : m) x = rng.uniform() < density;
  return m;
}



struct Shape {
  int N, IC, OC;
};

constexpr double kDensities[] = {0.0, 0.05, 0.1, 0.2, 0.5, 1.0};

// The three products of `packed` (built from W, mask) against the reference, for the active ISA.
void expect_products_match(const SparseLinearWeight& packed, const std::vector<float>& W,
                           const std::vector<uint8_t>& mask, int N, int IC, int OC) {
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 11);
  const auto dY = random_normal_floats(static_cast<size_t>(N) * OC, 12);
  const auto bias = random_normal_floats(OC, 13);
  const auto dX0 = random_normal_floats(static_cast<size_t>(N) * IC, 14);
  const auto dW0 = random_normal_floats(static_cast<size_t>(OC) * IC, 15);
  for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
    std::vector<double> want(static_cast<size_t>(N) * OC);
    ref::sparse_linear_forward<double>(want.data(), to_d(X).data(), W.data(), mask.data(), b,
                                       N, IC, OC);
    std::vector<float> got(want.size(), NAN);
    sparse_linear_forward(got.data(), X.data(), packed, b, N);
    EXPECT_LT(max_scaled_error(got, want, IC), 1e-5) << "forward, bias " << (b != nullptr);
  }
  for (bool accumulate : {false, true}) {
    std::vector<double> want = to_d(dX0);
    ref::sparse_linear_backward_input<double>(want.data(), to_d(dY).data(), W.data(),
                                              mask.data(), N, IC, OC, accumulate);
    std::vector<float> got = accumulate ? dX0 : std::vector<float>(dX0.size(), NAN);
    sparse_linear_backward_input(got.data(), dY.data(), packed, N, accumulate);
    EXPECT_LT(max_scaled_error(got, want, OC), 1e-5) << "input gradient, accumulate " << accumulate;
  }
  std::vector<double> want = to_d(dW0);
  ref::sparse_linear_backward_weight<double>(want.data(), to_d(dY).data(), to_d(X).data(),
                                             mask.data(), N, IC, OC);
  std::vector<float> got = dW0;
  sparse_linear_backward_weight(got.data(), dY.data(), X.data(), packed, N);
  EXPECT_LT(max_scaled_error(got, want, N), 1e-5) << "weight gradient";
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i] && got[i] != dW0[i]) FAIL() << "weight gradient changed outside the mask at " << i;
  }
}

class SparseLinearKernel : public ::testing::TestWithParam<Shape> {
 protected:
  void TearDown() override {
    sparse_linear_set_isa(max_isa());
    omp_set_num_threads(2);
  }
};

}  // namespace

TEST_P(SparseLinearKernel, MatchesReferenceAtEveryDensity) {
  const auto [N, IC, OC] = GetParam();
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 10);
  for (double density : kDensities) {
    SCOPED_TRACE(::testing::Message() << "density " << density);
    const auto mask = random_mask(W.size(), density, 100 + static_cast<uint64_t>(density * 100));
    SparseLinearWeight packed;
    sparse_linear_pack(packed, W.data(), mask.data(), OC, IC);
    EXPECT_EQ(packed.nnz, static_cast<size_t>(std::count(mask.begin(), mask.end(), 1)));
    for (Isa isa : frugal::kernels::available_isas()) {
      SCOPED_TRACE(isa_name(isa));
      sparse_linear_set_isa(isa);
      expect_products_match(packed, W, mask, N, IC, OC);
    }
  }
}

TEST_P(SparseLinearKernel, OneAndTwoThreadsAreBitIdentical) {
  const auto [N, IC, OC] = GetParam();
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 20);
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 21);
  const auto dY = random_normal_floats(static_cast<size_t>(N) * OC, 22);
  const auto mask = random_mask(W.size(), 0.2, 23);
  SparseLinearWeight packed;
  sparse_linear_pack(packed, W.data(), mask.data(), OC, IC);
  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    sparse_linear_set_isa(isa);
    std::vector<float> y[2], dx[2], dw[2];
    for (int t = 0; t < 2; ++t) {
      omp_set_num_threads(t + 1);
      y[t].assign(static_cast<size_t>(N) * OC, 0.0f);
      dx[t].assign(static_cast<size_t>(N) * IC, 0.0f);
      dw[t].assign(W.size(), 0.0f);
      sparse_linear_forward(y[t].data(), X.data(), packed, nullptr, N);
      sparse_linear_backward_input(dx[t].data(), dY.data(), packed, N, false);
      sparse_linear_backward_weight(dw[t].data(), dY.data(), X.data(), packed, N);
    }
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(dx[0], dx[1]);
    EXPECT_EQ(dw[0], dw[1]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparseLinearKernel,
                         ::testing::Values(Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{33, 20, 17},
                                           Shape{64, 16, 32}, Shape{97, 37, 50},
                                           Shape{130, 100, 45}, Shape{70, 50, 200},
                                           Shape{300, 260, 70}));

// (IC = 260 and OC = 200 span two 192-column chunks of W and of Wᵀ.)

// Whole rows and columns empty (and others full) in the same matrix.
TEST(SparseLinearPack, EmptyAndFullRowsAndColumns) {
  const int N = 70, OC = 40, IC = 33;
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 30);
  auto mask = random_mask(W.size(), 0.3, 31);
  for (int k = 0; k < IC; ++k) {
    mask[3 * IC + k] = 0;   // empty row 3
    mask[17 * IC + k] = 1;  // full row 17
  }
  for (int o = 0; o < OC; ++o) {
    mask[o * IC + 5] = 0;   // empty column 5
    mask[o * IC + 32] = 1;  // full last column
  }
  SparseLinearWeight packed;
  sparse_linear_pack(packed, W.data(), mask.data(), OC, IC);
  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    sparse_linear_set_isa(isa);
    expect_products_match(packed, W, mask, N, IC, OC);
  }
  sparse_linear_set_isa(max_isa());
}

// After an optimizer step only the values change: refresh must equal a fresh pack of the new
// weights (both copies); after a mask change a re-pack into the same handle (other nnz, buffers
// reused) must give the new mask's products.
TEST(SparseLinearPack, RefreshEqualsAFullPackAndRepackFollowsTheMask) {
  const int N = 90, OC = 70, IC = 50;
  const auto W0 = random_normal_floats(static_cast<size_t>(OC) * IC, 40);
  const auto W1 = random_normal_floats(W0.size(), 41);
  const auto mask0 = random_mask(W0.size(), 0.1, 42), mask1 = random_mask(W0.size(), 0.3, 43);
  SparseLinearWeight refreshed, fresh;
  sparse_linear_pack(refreshed, W0.data(), mask0.data(), OC, IC);
  sparse_linear_refresh_values(refreshed, W1.data());
  sparse_linear_pack(fresh, W1.data(), mask0.data(), OC, IC);
  ASSERT_EQ(refreshed.nnz, fresh.nnz);
  for (size_t j = 0; j < fresh.nnz; ++j) {
    ASSERT_EQ(refreshed.row_values[j], fresh.row_values[j]);
    ASSERT_EQ(refreshed.col_values[j], fresh.col_values[j]);
  }
  expect_products_match(refreshed, W1, mask0, N, IC, OC);
  sparse_linear_pack(refreshed, W1.data(), mask1.data(), OC, IC);  // denser: buffers grow
  expect_products_match(refreshed, W1, mask1, N, IC, OC);
  sparse_linear_pack(refreshed, W0.data(), mask0.data(), OC, IC);  // sparser: buffers reused
  expect_products_match(refreshed, W0, mask0, N, IC, OC);
}

TEST(SparseLinearPack, RejectsUnpackedWeightsAndEmptyShapes) {
  SparseLinearWeight packed;
  std::vector<float> y(4), x(4);
  EXPECT_THROW(sparse_linear_forward(y.data(), x.data(), packed, nullptr, 1), Error);
  const std::vector<uint8_t> mask(4, 1);
  EXPECT_THROW(sparse_linear_pack(packed, x.data(), mask.data(), 0, 4), Error);
}
