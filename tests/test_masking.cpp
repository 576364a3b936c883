// The masked-LM masking (data/masking.h): its statistics over 1M tokens against the specification
// (15% of the maskable tokens selected; of them 80% the mask token, 10% a random token, 10% kept),
// specials never selected nor drawn, reproducible from the seed and new at every step, the same
// for a sample whichever rank of a data-parallel layout masks it, and the spec's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/data/masking.h"

using frugal::data::MaskingSpec;
using frugal::data::mask_sample;
using frugal::data::masking_key;

namespace {

constexpr int32_t kVocab = 1000, kSeparator = 0, kPad = 998, kMask = 999;

MaskingSpec spec() {
  MaskingSpec s;
  s.mask_id = kMask, s.vocab_size = kVocab, s.specials = {kSeparator, kPad, kMask};
  return s;
}

// n samples of T tokens, uniform over the vocabulary (specials included), sample i from stream i.
std::vector<int32_t> corpus(int n, int T) {
  std::vector<int32_t> tokens(size_t(n) * T);
  for (int i = 0; i < n; ++i) {
    frugal::Rng rng(7, i);
    for (int t = 0; t < T; ++t) tokens[size_t(i) * T + t] = static_cast<int32_t>(rng.below(kVocab));
  }
  return tokens;
}

// Masks the samples ids[k] (rows k of tokens, T each) at `step`, as a rank holding those rows does.
void mask_rows(std::vector<int32_t>& tokens, std::vector<int32_t>& targets, const std::vector<int64_t>& ids,
               int T, int64_t step) {
  targets.resize(tokens.size());
  for (size_t k = 0; k < ids.size(); ++k)
    mask_sample(spec(), masking_key(42, step, ids[k]), tokens.data() + k * T, targets.data() + k * T, T);
}

}  // namespace

TEST(Masking, StatisticsOverOneMillionTokensMatchTheSpecificationAndSpecialsAreNeverMasked) {
  const int n = 1000, T = 1000;
  const std::vector<int32_t> original = corpus(n, T);
  std::vector<int32_t> tokens = original, targets;
  std::vector<int64_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  mask_rows(tokens, targets, ids, T, 3);
  const MaskingSpec s = spec();
  const auto is_special = [&](int32_t id) { return std::count(s.specials.begin(), s.specials.end(), id) > 0; };
  int64_t maskable = 0, selected = 0, masked = 0, random = 0, kept = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    if (is_special(original[i])) {
      ASSERT_EQ(targets[i], -1) << "special token selected at " << i;
      ASSERT_EQ(tokens[i], original[i]) << "special token changed at " << i;
      continue;
    }
    ++maskable;
    if (targets[i] < 0) {
      ASSERT_EQ(tokens[i], original[i]) << "unselected token changed at " << i;
      continue;
    }
    ++selected;
    ASSERT_EQ(targets[i], original[i]) << "the target is the original token";
    if (tokens[i] == kMask) {
      ++masked;
    } else if (tokens[i] != original[i]) {
      ++random;
      ASSERT_FALSE(is_special(tokens[i])) << "a special token drawn as the random replacement at " << i;
    } else {
      ++kept;  // includes the random draws that hit the original token (1 in 997 of them)
    }
  }
  const double rate = double(selected) / maskable, f_mask = double(masked) / selected,
               f_random = double(random) / selected, f_kept = double(kept) / selected;
  std::printf("maskable %lld, selected %.4f; of them mask %.4f, random %.4f, kept %.4f\n",
              static_cast<long long>(maskable), rate, f_mask, f_random, f_kept);
  EXPECT_NEAR(rate, 0.15, 0.005);
  EXPECT_NEAR(f_mask, 0.80, 0.005);
  EXPECT_NEAR(f_random, 0.10, 0.005);
  EXPECT_NEAR(f_kept, 0.10, 0.005);
}

TEST(Masking, ReproducibleFromTheSeedAndNewAtEveryStep) {
  const int n = 16, T = 256;
  const std::vector<int32_t> original = corpus(n, T);
  std::vector<int64_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 100 + i;
  std::vector<int32_t> a = original, b = original, c = original, ta, tb, tc;
  mask_rows(a, ta, ids, T, 5);
  mask_rows(b, tb, ids, T, 5);
  mask_rows(c, tc, ids, T, 6);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc) << "the next step must draw other masks";
  std::vector<int32_t> d = original, td(original.size());
  for (int k = 0; k < n; ++k)  // another seed
    mask_sample(spec(), masking_key(43, 5, ids[k]), d.data() + size_t(k) * T, td.data() + size_t(k) * T, T);
  EXPECT_NE(ta, td);
}

// A global batch of 8 samples masked in one process equals its rows masked by two ranks holding 4
// each, in any order: the masks follow the global sample id, never the rank or the row.
TEST(Masking, IdenticalAcrossDataParallelRanks) {
  const int n = 8, T = 128;
  const std::vector<int32_t> original = corpus(n, T);
  const std::vector<int64_t> ids = {40, 41, 42, 43, 44, 45, 46, 47};
  std::vector<int32_t> whole = original, whole_targets;
  mask_rows(whole, whole_targets, ids, T, 9);
  for (const std::vector<int>& rank_rows : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{7, 5, 6, 4}}) {
    std::vector<int32_t> part, part_targets;
    std::vector<int64_t> part_ids;
    for (int r : rank_rows) {
      part.insert(part.end(), original.begin() + size_t(r) * T, original.begin() + size_t(r + 1) * T);
      part_ids.push_back(ids[r]);
    }
    mask_rows(part, part_targets, part_ids, T, 9);
    for (size_t k = 0; k < rank_rows.size(); ++k) {
      const size_t row = size_t(rank_rows[k]) * T;
      EXPECT_TRUE(std::equal(part.begin() + k * T, part.begin() + (k + 1) * T, whole.begin() + row)) << k;
      EXPECT_TRUE(std::equal(part_targets.begin() + k * T, part_targets.begin() + (k + 1) * T,
                             whole_targets.begin() + row)) << k;
    }
  }
}

TEST(Masking, SpecRefusesBadSettings) {
  EXPECT_NO_THROW(spec().validate());
  MaskingSpec s = spec();
  s.mask_id = kVocab;
  EXPECT_THROW(s.validate(), frugal::Error);
  s = spec();
  s.to_mask = 0.95f;
  EXPECT_THROW(s.validate(), frugal::Error);
  s = spec();
  s.rate = 1.5f;
  EXPECT_THROW(s.validate(), frugal::Error);
  s = spec();
  s.vocab_size = 3, s.specials = {0, 1, 2}, s.mask_id = 2;
  EXPECT_THROW(s.validate(), frugal::Error);
}
