// The adamw kernel family (the fused AdamW update): the CPU kernel against the naive reference.
#include <gtest/gtest.h>

#include <cmath>

#include "frugal/kernels/ref/adamw_ref.h"
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
