// The adamw kernel family (the fused AdamW update): the CPU kernel against the naive reference, and
// the update that writes the bf16 working copy too (rounded to nearest or stochastically).
#include <gtest/gtest.h>

#include <cmath>

#include "frugal/kernels/ref/adamw_ref.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "kernel_test.h"

TEST(Kernels, AdamWMatchesReference) {
  const size_t n = 45;
  auto p = to_f(random_vector(n, 17)), g = to_f(random_vector(n, 18));
  auto m = to_f(random_vector(n, 19, 0.1)), v = to_f(random_vector(n, 20, 0.1));
  for (auto& x : v) x = std::fabs(x);
  for (bool decay : {false, true}) {
    auto p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
    k::adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3}, decay);
    ref::adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, decay);
    EXPECT_LT(max_rel_error(to_d(p1), to_d(p2)), 1e-6);
    EXPECT_LT(max_rel_error(to_d(m1), to_d(m2)), 1e-6);
    EXPECT_LT(max_rel_error(to_d(v1), to_d(v2)), 1e-6);
  }
}

// The gradient scale (clipping's factor, AdamWStep::grad_scale): on every path the update of g
// with scale s is the update of g · s, scaled beforehand, bit for bit.
TEST(Kernels, AdamWGradScaleIsTheUpdateOfTheScaledGradient) {
  const size_t n = 45;
  auto p = to_f(random_vector(n, 37)), g = to_f(random_vector(n, 38));
  auto m = to_f(random_vector(n, 39, 0.1)), v = to_f(random_vector(n, 40, 0.1));
  for (auto& x : v) x = std::fabs(x);
  k::AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  const float scale = 0.3f;
  on_every_isa([&] {
    auto p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v, scaled = g;
    k::scale_inplace(scaled.data(), n, scale);
    step.grad_scale = 1.0f;
    k::adamw_update(p1.data(), scaled.data(), m1.data(), v1.data(), n, step, true);
    step.grad_scale = scale;
    std::vector<k::bf16> copy(n), want(n);
    k::adamw_update_bf16(p2.data(), copy.data(), g.data(), m2.data(), v2.data(), n, step, true);
    EXPECT_EQ(p2, p1);
    EXPECT_EQ(m2, m1);
    EXPECT_EQ(v2, v1);
    k::f32_to_bf16(want.data(), p1.data(), n);
    EXPECT_TRUE(copy == want);
    EXPECT_NE(p1, p);
  }, /*with_reference=*/true);
}

// The update writing the bf16 working copy too: on every path (the reference's too) p, m and v are
// that path's adamw_update's bit for bit and p16 the reference's rounding of the updated p, to
// nearest and stochastically (train.bf16_rounding = "stochastic": element by element from its
// index, the indices crossing 2^32 halfway), which differ (n = 45: the masked tail too).
TEST(Kernels, AdamWBf16CopyIsTheRoundedUpdate) {
  const size_t n = 45;
  auto p = to_f(random_vector(n, 27)), g = to_f(random_vector(n, 28));
  auto m = to_f(random_vector(n, 29, 0.1)), v = to_f(random_vector(n, 30, 0.1));
  for (auto& x : v) x = std::fabs(x);
  const k::AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  const k::Bf16Rounding nearest, stochastic{.stochastic = true, .seed = 3, .first = (uint64_t(1) << 32) - 20};
  on_every_isa([&] {
    for (bool decay : {false, true}) {
      std::vector<std::vector<k::bf16>> copies;
      for (const k::Bf16Rounding& rounding : {nearest, stochastic}) {
        auto p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
        k::adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, step, decay);
        std::vector<k::bf16> want(n), got(n);
        ref::round_to_bf16(want.data(), p1.data(), n, rounding);
        k::adamw_update_bf16(p2.data(), got.data(), g.data(), m2.data(), v2.data(), n, step, decay, rounding);
        EXPECT_EQ(p2, p1);
        EXPECT_EQ(m2, m1);
        EXPECT_EQ(v2, v1);
        EXPECT_TRUE(got == want);
        copies.push_back(got);
      }
      EXPECT_FALSE(copies[0] == copies[1]);
    }
  }, /*with_reference=*/true);
}
