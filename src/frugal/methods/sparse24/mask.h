// 2:4 sparsity masks for the FFN weights (METHODS.md section 4): the transposable 4x4-block
// mask (both W and Wᵀ are 2:4 along their rows), the plain row-wise 2:4 mask, and the flip rate.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal::sparse24 {

// A 4x4 0/1 pattern, row-major: bit (4*r + c) set means entry (r, c) is kept.
using BlockPattern = uint16_t;

// The 90 4x4 patterns with exactly two ones in every row and every column, in increasing order
// of their bit value (this order is also the tie-break: the first best pattern wins).
const std::vector<BlockPattern>& transposable_patterns();

// mask (R,K) = for each 4x4 block of W (R,K), the pattern of transposable_patterns() maximising
// Σ pattern ⊙ |W_block| (1 = kept, 0 = pruned). Requires R % 4 == 0 and K % 4 == 0.
// OpenMP-parallel over blocks; deterministic for any thread count.
void transposable_mask_24(const float* W, int R, int K, uint8_t* mask);

// mask (R,K) = in every group of 4 consecutive entries of a row, the two largest |w| are kept
// (ties: the lower column index wins). Requires K % 4 == 0.
void row_mask_24(const float* W, int R, int K, uint8_t* mask);

// Masked decay (METHODS.md section 4), added to the gradient after clipping:
// grad[i] += lambda * W[i] where mask[i] == 0 (the pruned weights decay towards zero).
void add_masked_decay(float* grad, const float* W, const uint8_t* mask, size_t n, float lambda);

// Fraction of the n entries where old_mask and new_mask differ (0 when n == 0).
double flip_rate(const uint8_t* old_mask, const uint8_t* new_mask, size_t n);

}  // namespace frugal::sparse24
