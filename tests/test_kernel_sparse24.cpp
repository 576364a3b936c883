// 2:4 sparse linear kernels against the fp64 reference: forward (bias on/off) and input gradient
// (accumulate on/off), random shapes incl. odd N, every one of the 90 transposable block patterns,
// both instruction sets, 1 vs 2 threads bit-equal, the row-only packing, and the MVUE estimator.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/sparse24.h"
#include "frugal/kernels/ref/sparse24_ref.h"
#include "frugal/methods/sparse24/mask.h"
#include "gradcheck.h"
#include "optimised_kernels.h"

using namespace frugal;
using namespace frugal::kernels;
using frugal::testing::max_scaled_error;
using frugal::testing::random_normal_floats;
using frugal::testing::to_d;

const auto* const optimised_kernels = frugal::testing::register_optimised_kernels();

namespace {




struct Shape {
  int N, IC, OC;
};

// Every instruction set this CPU can run.
class Sparse24Kernel : public ::testing::TestWithParam<Shape> {
 protected:
  void TearDown() override { sparse24_set_isa(max_isa()); }
};

}  // namespace

TEST_P(Sparse24Kernel, MatchesReference) {
  const auto [N, IC, OC] = GetParam();
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 10);
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 11);
  const auto dY = random_normal_floats(static_cast<size_t>(N) * OC, 12);
  const auto bias = random_normal_floats(OC, 13);
  const auto dX0 = random_normal_floats(static_cast<size_t>(N) * IC, 14);
  std::vector<uint8_t> mask(W.size());
  sparse24::transposable_mask_24(W.data(), OC, IC, mask.data());
  Sparse24Weight packed;
  sparse24_pack(packed, W.data(), mask.data(), OC, IC);

  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    sparse24_set_isa(isa);
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<double> want(static_cast<size_t>(N) * OC);
      ref::sparse24_matmul_forward<double>(want.data(), to_d(X).data(), W.data(), mask.data(),
                                           b, N, IC, OC);
      std::vector<float> got(want.size(), NAN);
      sparse24_matmul_forward(got.data(), X.data(), packed, b, N);
      EXPECT_LT(max_scaled_error(got, want, IC), 1e-5) << "forward, bias " << (b != nullptr);
    }
    for (bool accumulate : {false, true}) {
      std::vector<double> want = to_d(dX0);
      ref::sparse24_matmul_backward_input<double>(want.data(), to_d(dY).data(), W.data(),
                                                  mask.data(), N, IC, OC, accumulate);
      std::vector<float> got = dX0;
      sparse24_matmul_backward_input(got.data(), dY.data(), packed, N, accumulate);
      EXPECT_LT(max_scaled_error(got, want, OC), 1e-5) << "backward, accumulate " << accumulate;
    }
  }
}

// Both products against the fp64 reference for every instruction set, mask given.
static void expect_products_match(const std::vector<float>& W, const std::vector<uint8_t>& mask, int N,
                           int IC, int OC) {
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 51);
  const auto dY = random_normal_floats(static_cast<size_t>(N) * OC, 52);
  Sparse24Weight packed;
  sparse24_pack(packed, W.data(), mask.data(), OC, IC);
  std::vector<double> want_y(static_cast<size_t>(N) * OC), want_dx(static_cast<size_t>(N) * IC);
  ref::sparse24_matmul_forward<double>(want_y.data(), to_d(X).data(), W.data(), mask.data(),
                                       nullptr, N, IC, OC);
  ref::sparse24_matmul_backward_input<double>(want_dx.data(), to_d(dY).data(), W.data(),
                                              mask.data(), N, IC, OC, false);
  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    sparse24_set_isa(isa);
    std::vector<float> y(want_y.size(), NAN), dx(want_dx.size(), NAN);
    sparse24_matmul_forward(y.data(), X.data(), packed, nullptr, N);
    sparse24_matmul_backward_input(dx.data(), dY.data(), packed, N, false);
    EXPECT_LT(max_scaled_error(y, want_y, IC), 1e-5);
    EXPECT_LT(max_scaled_error(dx, want_dx, OC), 1e-5);
  }
  sparse24_set_isa(max_isa());
}

// The kernel handles each 4x4 block by its row structure: lay every pattern out once per block
// row (in two different orders, so chunks mix the structures differently) and in both products.
TEST(Sparse24Kernel, EveryTransposablePatternMatchesReference) {
  const auto& patterns = sparse24::transposable_patterns();
  const int P = static_cast<int>(patterns.size()), OC = 8, IC = 4 * P, N = 37;
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 50);
  std::vector<uint8_t> mask(W.size());
  for (int bo = 0; bo < 2; ++bo)
    for (int bi = 0; bi < P; ++bi) {
      const sparse24::BlockPattern pattern = patterns[(bi + bo * P / 2) % P];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c)
          mask[static_cast<size_t>(4 * bo + r) * IC + 4 * bi + c] = (pattern >> (4 * r + c)) & 1;
    }
  expect_products_match(W, mask, N, IC, OC);
}

TEST_P(Sparse24Kernel, OneAndTwoThreadsAreBitIdentical) {
  const auto [N, IC, OC] = GetParam();
  const auto W = random_normal_floats(static_cast<size_t>(OC) * IC, 20);
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 21);
  const auto dY = random_normal_floats(static_cast<size_t>(N) * OC, 22);
  std::vector<uint8_t> mask(W.size());
  sparse24::transposable_mask_24(W.data(), OC, IC, mask.data());
  Sparse24Weight packed;
  sparse24_pack(packed, W.data(), mask.data(), OC, IC);
  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    sparse24_set_isa(isa);
    std::vector<float> y[2], dx[2];
    for (int t = 0; t < 2; ++t) {
      omp_set_num_threads(t + 1);
      y[t].assign(static_cast<size_t>(N) * OC, 0.0f);
      dx[t].assign(static_cast<size_t>(N) * IC, 0.0f);
      sparse24_matmul_forward(y[t].data(), X.data(), packed, nullptr, N);
      sparse24_matmul_backward_input(dx[t].data(), dY.data(), packed, N, false);
    }
    omp_set_num_threads(2);
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(dx[0], dx[1]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Sparse24Kernel,
                         ::testing::Values(Shape{1, 4, 4}, Shape{7, 8, 12}, Shape{33, 20, 36},
                                           Shape{97, 64, 16}, Shape{130, 36, 100},
                                           Shape{200, 260, 68}));

TEST(Sparse24Pack, RejectsMasksThatAreNotTransposable24) {
  const int OC = 8, IC = 8;
  const auto W = random_normal_floats(OC * IC, 30);
  std::vector<uint8_t> mask(W.size());
  sparse24::row_mask_24(W.data(), OC, IC, mask.data());  // 2:4 rows, columns not (checked)
  Sparse24Weight packed;
  bool columns_ok = true;
  for (int c = 0; c < IC; ++c)
    for (int b = 0; b < OC; b += 4)
      columns_ok &= mask[b * IC + c] + mask[(b + 1) * IC + c] + mask[(b + 2) * IC + c] +
                        mask[(b + 3) * IC + c] == 2;
  ASSERT_FALSE(columns_ok) << "this seed's row mask is transposable; pick a seed whose mask is not";
  EXPECT_THROW(sparse24_pack(packed, W.data(), mask.data(), OC, IC), Error);
  mask[0] ^= 1;  // row 0 of block (0,0) now keeps 1 or 3
  EXPECT_THROW(sparse24_pack(packed, W.data(), mask.data(), OC, IC), Error);
  EXPECT_THROW(sparse24_pack(packed, W.data(), mask.data(), OC, 6), Error);
  std::vector<float> y(OC);
  EXPECT_THROW(sparse24_matmul_forward(y.data(), W.data(), packed, nullptr, 1), Error);
}

TEST(Sparse24Pack, RowOnlyPackingRunsTheForwardAndRefusesTheInputGradient) {
  const int N = 37, OC = 12, IC = 20;
  const auto W = random_normal_floats(OC * IC, 40);
  const auto X = random_normal_floats(N * IC, 41);
  std::vector<uint8_t> mask(W.size());
  sparse24::row_mask_24(W.data(), OC, IC, mask.data());
  Sparse24Weight packed;
  sparse24_pack(packed, W.data(), mask.data(), OC, IC, /*transposable=*/false);
  std::vector<double> want(static_cast<size_t>(N) * OC);
  ref::sparse24_matmul_forward<double>(want.data(), to_d(X).data(), W.data(), mask.data(),
                                       nullptr, N, IC, OC);
  std::vector<float> got(want.size(), NAN);
  sparse24_matmul_forward(got.data(), X.data(), packed, nullptr, N);
  EXPECT_LT(max_scaled_error(got, want, IC), 1e-5);
  std::vector<float> dx(static_cast<size_t>(N) * IC);
  EXPECT_THROW(sparse24_matmul_backward_input(dx.data(), got.data(), packed, N, false), Error);
  mask[1] ^= 1;
  EXPECT_THROW(sparse24_pack(packed, W.data(), mask.data(), OC, IC, false), Error);
}

// After an optimizer step only the values change: sparse24_refresh_values must give exactly the
// packing a full sparse24_pack of the new weights gives (several chunks, both mask kinds).
TEST(Sparse24Pack, RefreshValuesEqualsAFullRepack) {
  const int N = 50, OC = 200, IC = 104;  // Wᵀ has 50 groups: two full chunks and a partial one
  const auto W0 = random_normal_floats(static_cast<size_t>(OC) * IC, 50);
  const auto W1 = random_normal_floats(W0.size(), 51);
  const auto X = random_normal_floats(static_cast<size_t>(N) * IC, 52);
  for (bool transposable : {true, false}) {
    SCOPED_TRACE(transposable ? "transposable" : "row-only");
    std::vector<uint8_t> mask(W0.size());
    if (transposable)
      sparse24::transposable_mask_24(W0.data(), OC, IC, mask.data());
    else
      sparse24::row_mask_24(W0.data(), OC, IC, mask.data());
    Sparse24Weight refreshed, fresh;
    sparse24_pack(refreshed, W0.data(), mask.data(), OC, IC, transposable);
    sparse24_refresh_values(refreshed, W1.data());
    sparse24_pack(fresh, W1.data(), mask.data(), OC, IC, transposable);
    for (auto [a, b] : {std::pair{&refreshed.w, &fresh.w}, {&refreshed.wt, &fresh.wt}})
      ASSERT_TRUE(std::equal(a->values.data(), a->values.data() + a->values.size(), b->values.data(),
                             b->values.data() + b->values.size()));
    std::vector<float> y(static_cast<size_t>(N) * OC);
    sparse24_matmul_forward(y.data(), X.data(), refreshed, nullptr, N);
    std::vector<double> want(y.size());
    ref::sparse24_matmul_forward<double>(want.data(), to_d(X).data(), W1.data(), mask.data(),
                                         nullptr, N, IC, OC);
    EXPECT_LT(max_scaled_error(y, want, IC), 1e-5);
  }
}

// The MVUE estimator alone: one kept entry per pair of rows with their summed magnitude, an odd
// last row copied, and the mean over many keys equal to the input.
TEST(Mvue24Rows, IsUnbiasedAnd24AlongTokens) {
  const int N = 9, OC = 5, draws = 4000;
  std::vector<float> dout(N * OC), out(N * OC);
  for (int i = 0; i < N * OC; ++i) dout[i] = std::sin(1.7f * i + 0.3f) * (i % 6 == 0 ? 0.0f : 1.0f);
  std::vector<double> mean(N * OC, 0.0);
  for (int d = 0; d < draws; ++d) {
    mvue24_rows(out.data(), dout.data(), N, OC, mix64(d));
    for (int p = 0; p < N / 2; ++p)
      for (int o = 0; o < OC; ++o) {
        const float a = dout[2 * p * OC + o], b = dout[(2 * p + 1) * OC + o];
        const float sa = out[2 * p * OC + o], sb = out[(2 * p + 1) * OC + o];
        ASSERT_TRUE(sa == 0.0f || sb == 0.0f) << "one entry per pair of rows";
        ASSERT_FLOAT_EQ(std::fabs(sa) + std::fabs(sb), std::fabs(a) + std::fabs(b));
      }
    for (int o = 0; o < OC; ++o) ASSERT_EQ(out[(N - 1) * OC + o], dout[(N - 1) * OC + o]) << "odd last row copied";
    for (int i = 0; i < N * OC; ++i) mean[i] += out[i] / double(draws);
  }
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(mean[i], dout[i], 0.06) << i;
}

// A tensor-parallel part of the output columns (here 0, 1 of each of three (q, k, v)-like pieces of
// 4) given their whole-linear indices draws the whole linear's numbers: its estimate is the whole
// estimate's columns, bit for bit; without the map it draws other numbers.
TEST(Mvue24Rows, APartOfTheColumnsDrawsTheWholeLinearsNumbers) {
  const int N = 64, OC = 12;
  const std::vector<int32_t> columns = {0, 1, 4, 5, 8, 9};
  const int part_OC = int(columns.size());
  std::vector<float> dout(N * OC), whole(N * OC), part_dout(N * part_OC), part(N * part_OC);
  for (int i = 0; i < N * OC; ++i) dout[i] = std::sin(0.37f * i + 0.1f);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < part_OC; ++o) part_dout[n * part_OC + o] = dout[n * OC + columns[o]];
  const uint64_t key = mix64(7);
  mvue24_rows(whole.data(), dout.data(), N, OC, key);
  mvue24_rows(part.data(), part_dout.data(), N, part_OC, key, columns.data(), OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < part_OC; ++o) ASSERT_EQ(part[n * part_OC + o], whole[n * OC + columns[o]]) << n << " " << o;
  mvue24_rows(part.data(), part_dout.data(), N, part_OC, key);
  int same = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < part_OC; ++o) same += part[n * part_OC + o] == whole[n * OC + columns[o]];
  EXPECT_LT(same, N * part_OC) << "the unmapped part must draw other numbers";
}
