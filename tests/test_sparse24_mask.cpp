// 2:4 masks: the 90 transposable patterns, validity and optimality of the transposable mask,
// the row-wise mask, the flip rate, and thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/methods/sparse24/mask.h"

using namespace frugal;
using namespace frugal::sparse24;

namespace {

std::vector<float> random_matrix(int R, int K, uint64_t seed) {
  Rng rng(seed, 0);
  std::vector<float> w(static_cast<size_t>(R) * K);
  for (auto& x : w) x = static_cast<float>(rng.normal());
  return w;
}

// Brute force over all 2^16 subsets: the best Σ |w| over subsets with two per row and column.
double brute_force_best(const float* w, int ld) {
  double best = -1;
  for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
    bool ok = true;
    for (int i = 0; i < 4 && ok; ++i)
      ok = __builtin_popcount((bits >> (4 * i)) & 0xFu) == 2 &&
           __builtin_popcount(bits & (0x1111u << i)) == 2;
    if (!ok) continue;
    double s = 0;
    for (int e = 0; e < 16; ++e)
      if ((bits >> e) & 1u) s += std::fabs(w[(e / 4) * ld + e % 4]);
    best = std::max(best, s);
  }
  return best;
}

}  // namespace

TEST(Sparse24Mask, ThereAreExactly90DistinctTransposablePatterns) {
  const auto& pats = transposable_patterns();
  ASSERT_EQ(pats.size(), 90u);
  EXPECT_EQ(std::set<BlockPattern>(pats.begin(), pats.end()).size(), 90u);
  for (BlockPattern p : pats) EXPECT_EQ(__builtin_popcount(p), 8);
}

TEST(Sparse24Mask, TransposableMaskHasTwoPerRowAndColumnOfEveryBlock) {
  const int R = 32, K = 48;
  auto W = random_matrix(R, K, 1);
  std::vector<uint8_t> m(W.size(), 7);
  transposable_mask_24(W.data(), R, K, m.data());
  for (int br = 0; br < R; br += 4)
    for (int bc = 0; bc < K; bc += 4)
      for (int i = 0; i < 4; ++i) {
        int row = 0, col = 0;
        for (int j = 0; j < 4; ++j) {
          const uint8_t a = m[(br + i) * K + bc + j], b = m[(br + j) * K + bc + i];
          ASSERT_TRUE(a <= 1 && b <= 1);
          row += a;
          col += b;
        }
        EXPECT_EQ(row, 2) << "block " << br << "," << bc << " row " << i;
        EXPECT_EQ(col, 2) << "block " << br << "," << bc << " column " << i;
      }
}

TEST(Sparse24Mask, TransposableMaskIsOptimalAgainstBruteForce) {
  const int R = 8, K = 16;  // 8 random blocks
  auto W = random_matrix(R, K, 2);
  std::vector<uint8_t> m(W.size());
  transposable_mask_24(W.data(), R, K, m.data());
  for (int br = 0; br < R; br += 4)
    for (int bc = 0; bc < K; bc += 4) {
      double chosen = 0;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          if (m[(br + i) * K + bc + j]) chosen += std::fabs(W[(br + i) * K + bc + j]);
      EXPECT_NEAR(chosen, brute_force_best(&W[br * K + bc], K), 1e-5);
    }
}

TEST(Sparse24Mask, TransposableMaskKeepsTheObviousPattern) {
  // Large entries on a pattern with two per row/column; the mask must keep exactly those.
  const int K = 4;
  const int keep[4][4] = {{1, 1, 0, 0}, {0, 1, 1, 0}, {0, 0, 1, 1}, {1, 0, 0, 1}};
  std::vector<float> W(16);
  for (int i = 0; i < 16; ++i) W[i] = keep[i / 4][i % 4] ? -5.0f - i : 0.1f * i;
  std::vector<uint8_t> m(16);
  transposable_mask_24(W.data(), 4, K, m.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(m[i], keep[i / 4][i % 4]) << i;
}

TEST(Sparse24Mask, RejectsShapesNotDivisibleBy4) {
  std::vector<float> W(6 * 8);
  std::vector<uint8_t> m(W.size());
  EXPECT_THROW(transposable_mask_24(W.data(), 6, 8, m.data()), Error);
  EXPECT_THROW(transposable_mask_24(W.data(), 8, 6, m.data()), Error);
  EXPECT_THROW(row_mask_24(W.data(), 8, 6, m.data()), Error);
}

TEST(Sparse24Mask, RowMaskKeepsTheTwoLargestOfEachGroup) {
  const int R = 5, K = 12;
  auto W = random_matrix(R, K, 3);
  std::vector<uint8_t> m(W.size());
  row_mask_24(W.data(), R, K, m.data());
  for (int g = 0; g < R * K / 4; ++g) {
    float kept_min = 1e30f, dropped_max = -1;
    int kept = 0;
    for (int j = 0; j < 4; ++j) {
      const float a = std::fabs(W[4 * g + j]);
      if (m[4 * g + j]) {
        ++kept;
        kept_min = std::min(kept_min, a);
      } else {
        dropped_max = std::max(dropped_max, a);
      }
    }
    EXPECT_EQ(kept, 2);
    EXPECT_GE(kept_min, dropped_max);
  }
  // Ties keep the lower column index.
  std::vector<float> ties = {1, 1, 1, 1};
  std::vector<uint8_t> tm(4);
  row_mask_24(ties.data(), 1, 4, tm.data());
  EXPECT_EQ(tm, (std::vector<uint8_t>{1, 1, 0, 0}));
}

TEST(Sparse24Mask, TransposableScoreIsAtMostRowMaskScore) {
  // The row mask is the unconstrained optimum per row, so it bounds the transposable one.
  const int R = 16, K = 16;
  auto W = random_matrix(R, K, 4);
  std::vector<uint8_t> mt(W.size()), mr(W.size());
  transposable_mask_24(W.data(), R, K, mt.data());
  row_mask_24(W.data(), R, K, mr.data());
  double st = 0, sr = 0;
  for (size_t i = 0; i < W.size(); ++i) {
    st += mt[i] * std::fabs(W[i]);
    sr += mr[i] * std::fabs(W[i]);
  }
  EXPECT_LE(st, sr + 1e-4);
  EXPECT_GT(st, 0.9 * sr);
}

TEST(Sparse24Mask, FlipRateCountsChangedEntries) {
  std::vector<uint8_t> a = {1, 0, 1, 0, 1, 1, 0, 0}, b = {1, 1, 0, 0, 1, 1, 0, 1};
  EXPECT_DOUBLE_EQ(flip_rate(a.data(), b.data(), a.size()), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(flip_rate(a.data(), a.data(), a.size()), 0.0);
  EXPECT_DOUBLE_EQ(flip_rate(a.data(), b.data(), 0), 0.0);
}

TEST(Sparse24Mask, SameMaskOnOneAndTwoThreads) {
  const int R = 64, K = 128;
  auto W = random_matrix(R, K, 5);
  W[3] = W[2] = W[1] = W[0];  // ties inside a block
  std::vector<uint8_t> m1(W.size()), m2(W.size());
  omp_set_num_threads(1);
  transposable_mask_24(W.data(), R, K, m1.data());
  omp_set_num_threads(2);
  transposable_mask_24(W.data(), R, K, m2.data());
  EXPECT_EQ(m1, m2);
}
