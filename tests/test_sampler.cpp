// sample_token on hand-made logits: which tokens top-k and top-p (nucleus) let through, and that
// the frequencies of the drawn tokens follow the temperature-scaled softmax over those tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/train/sampler.h"

namespace {

// Out of order on purpose: by logit the tokens rank 1, 3, 0, 2, 4.
const std::vector<float> kLogits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};

// Draws `n` tokens (fixed seed) and checks that exactly the tokens `allowed` occur, each with
// frequency within 4.5 standard deviations of exp(logit / T) normalised over `allowed`.
void expect_draws_follow(const frugal::SampleOptions& o, const std::vector<int>& allowed) {
  const int V = static_cast<int>(kLogits.size()), n = 4000;
  double sum = 0;
  for (int t : allowed) sum += std::exp(kLogits[t] / o.temperature);
  std::vector<int> counts(V, 0);
  frugal::Rng rng(7, 3);
  for (int i = 0; i < n; ++i) {
    const int32_t t = frugal::sample_token(kLogits.data(), V, o, rng.uniform());
    ASSERT_TRUE(t >= 0 && t < V) << t;
    ++counts[t];
  }
  for (int t = 0; t < V; ++t) {
    const bool is_allowed = std::find(allowed.begin(), allowed.end(), t) != allowed.end();
    const double p = is_allowed ? std::exp(kLogits[t] / o.temperature) / sum : 0.0;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(double(counts[t]) / n, p, 4.5 * sigma) << "token " << t << " (T " << o.temperature
                                                        << ", top-k " << o.top_k << ", top-p " << o.top_p << ")";
  }
}

frugal::SampleOptions options(double temperature, int top_k, double top_p) {
  return {.temperature = temperature, .top_k = top_k, .top_p = top_p};
}

}  // namespace

TEST(SampleToken, UnfilteredFollowsTemperatureScaledSoftmax) {
  expect_draws_follow(options(1.0, 0, 1.0), {0, 1, 2, 3, 4});
  expect_draws_follow(options(2.0, 0, 1.0), {0, 1, 2, 3, 4});  // flatter: 0.43 .. 0.06
  expect_draws_follow(options(0.5, 0, 1.0), {0, 1, 2, 3, 4});  // sharper: 0.86 .. 0.0003
}

TEST(SampleToken, TopKKeepsTheKLargestLogits) {
  expect_draws_follow(options(1.0, 2, 1.0), {1, 3});  // e³ : e² = 0.73 : 0.27
  expect_draws_follow(options(2.0, 3, 1.0), {1, 3, 0});
  expect_draws_follow(options(1.0, 1, 1.0), {1});
  expect_draws_follow(options(1.0, 99, 1.0), {0, 1, 2, 3, 4});  // k above V: no filter
}

// Softmax at T = 1: 0.636, 0.234, 0.086, 0.032, 0.012 (tokens 1, 3, 0, 2, 4); cumulative 0.636,
// 0.871, 0.957, 0.988. At T = 2: 0.429, 0.260, 0.158, 0.096, 0.058; cumulative 0.429, 0.689, 0.846.
// Top-p keeps the smallest prefix whose mass reaches p, after the temperature.
TEST(SampleToken, TopPKeepsTheSmallestPrefixReachingP) {
  expect_draws_follow(options(1.0, 0, 0.5), {1});
  expect_draws_follow(options(1.0, 0, 0.8), {1, 3});
  expect_draws_follow(options(1.0, 0, 0.9), {1, 3, 0});
  expect_draws_follow(options(2.0, 0, 0.8), {1, 3, 0});
  expect_draws_follow(options(2.0, 0, 0.6), {1, 3});
  // Top-k first, then top-p over the renormalised top 2: e³ / (e³ + e²) = 0.731 < 0.75.
  expect_draws_follow(options(1.0, 2, 0.75), {1, 3});
  expect_draws_follow(options(1.0, 2, 0.7), {1});
}
