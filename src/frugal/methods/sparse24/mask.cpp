// 2:4 mask search: exhaustive transposable 4x4 patterns as one small product per block of
// block magnitudes against the 90 patterns, plus the row-wise mask and the flip rate.
#include "frugal/methods/sparse24/mask.h"

#include <cmath>

#include "frugal/core/error.h"

namespace frugal::sparse24 {
namespace {

constexpr int kNumPatterns = 90;

// Enumerate every 16-bit pattern and keep those with two ones in each row and column.
std::vector<BlockPattern> enumerate_patterns() {
  std::vector<BlockPattern> out;
  for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
    bool ok = true;
    for (int i = 0; i < 4 && ok; ++i) {
      const int row_ones = __builtin_popcount((bits >> (4 * i)) & 0xFu);
      const int col_ones = __builtin_popcount(bits & (0x1111u << i));
      ok = row_ones == 2 && col_ones == 2;
    }
    if (ok) out.push_back(static_cast<BlockPattern>(bits));
  }
  return out;
}

// The patterns as a (16, 90) 0/1 float matrix, so a block's scores are |block| (16) · P.
struct PatternMatrix {
  std::array<std::array<float, kNumPatterns>, 16> p{};
  PatternMatrix() {
    const auto& pats = transposable_patterns();
    for (int j = 0; j < kNumPatterns; ++j)
      for (int e = 0; e < 16; ++e) p[e][j] = (pats[j] >> e) & 1u ? 1.0f : 0.0f;
  }
};

}  // namespace

const std::vector<BlockPattern>& transposable_patterns() {
  static const std::vector<BlockPattern> patterns = enumerate_patterns();
  return patterns;
}

void transposable_mask_24(const float* W, int R, int K, uint8_t* mask) {
  FRUGAL_CHECK(R % 4 == 0 && K % 4 == 0,
               "transposable 2:4 mask needs both dimensions divisible by 4, got ({}, {}); pad the "
               "layer width to a multiple of 4 or keep this layer dense",
               R, K);
  const auto& pats = transposable_patterns();
  FRUGAL_CHECK(static_cast<int>(pats.size()) == kNumPatterns,
               "internal error: found {} transposable 4x4 patterns instead of 90", pats.size());
  static const PatternMatrix pm;
  const int block_rows = R / 4, block_cols = K / 4;
  const long long num_blocks = static_cast<long long>(block_rows) * block_cols;
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < num_blocks; ++b) {
    const int br = static_cast<int>(b / block_cols), bc = static_cast<int>(b % block_cols);
    const float* w = W + static_cast<size_t>(4 * br) * K + 4 * bc;
    float scores[kNumPatterns] = {};
    for (int e = 0; e < 16; ++e) {
      const float m = std::fabs(w[static_cast<size_t>(e / 4) * K + e % 4]);
      for (int j = 0; j < kNumPatterns; ++j) scores[j] += m * pm.p[e][j];
    }
    int best = 0;
    for (int j = 1; j < kNumPatterns; ++j)
      if (scores[j] > scores[best]) best = j;
    uint8_t* m = mask + static_cast<size_t>(4 * br) * K + 4 * bc;
    for (int e = 0; e < 16; ++e) m[static_cast<size_t>(e / 4) * K + e % 4] = (pats[best] >> e) & 1u;
  }
}

void row_mask_24(const float* W, int R, int K, uint8_t* mask) {
  FRUGAL_CHECK(K % 4 == 0,
               "row-wise 2:4 mask needs the row length divisible by 4, got {}; pad the layer "
               "width to a multiple of 4 or keep this layer dense",
               K);
  const long long num_groups = static_cast<long long>(R) * (K / 4);
#pragma omp parallel for schedule(static)
  for (long long g = 0; g < num_groups; ++g) {
    const float* w = W + 4 * g;
    uint8_t* m = mask + 4 * g;
    // Entry i is kept when fewer than two entries beat it (larger, or equal with lower index).
    for (int i = 0; i < 4; ++i) {
      int beaten_by = 0;
      for (int j = 0; j < 4; ++j) {
        const float a = std::fabs(w[j]), b = std::fabs(w[i]);
        beaten_by += (a > b) || (a == b && j < i);
      }
      m[i] = beaten_by < 2;
    }
  }
}

void add_masked_decay(float* grad, const float* W, const uint8_t* mask, size_t n, float lambda) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) grad[i] += (mask[i] ? 0.0f : lambda) * W[i];  // branch-free
}

double flip_rate(const uint8_t* old_mask, const uint8_t* new_mask, size_t n) {
  if (n == 0) return 0.0;
  size_t changed = 0;
#pragma omp parallel for reduction(+ : changed) schedule(static)
  for (size_t i = 0; i < n; ++i) changed += (old_mask[i] != 0) != (new_mask[i] != 0);
  return static_cast<double>(changed) / static_cast<double>(n);
}

}  // namespace frugal::sparse24
