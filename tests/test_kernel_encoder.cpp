// The encoder kernel family (token + position embedding): the CPU kernels against the naive
// reference, the reference backward against fp64 finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "frugal/kernels/ref/encoder_ref.h"
#include "kernel_test.h"

TEST(Kernels, EncoderMatchesReferenceAndGradients) {
  const int B = 2, T = 5, C = 16, V = 7;
  std::vector<int32_t> tok = {1, 3, 3, 0, 6, 2, 2, 5, 1, 3};
  auto wte = random_vector(V * C, 9), wpe = random_vector(T * C, 10), R = random_vector(B * T * C, 11);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    ref::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  std::vector<double> dwte(V * C, 0.0), dwpe(T * C, 0.0);
  ref::encoder_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  EXPECT_LT(max_rel_error(dwte, numeric_gradient(wte, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dwpe, numeric_gradient(wpe, loss)), 1e-6);
  auto wtef = to_f(wte), wpef = to_f(wpe), Rf = to_f(R);
  std::vector<float> o1(B * T * C), o2(B * T * C);
  k::encoder_forward(o1.data(), tok.data(), wtef.data(), wpef.data(), B, T, C);
  ref::encoder_forward(o2.data(), tok.data(), wtef.data(), wpef.data(), B, T, C);
  EXPECT_EQ(o1, o2);
  // without a position embedding (rotary positions): the token rows alone
  k::encoder_forward(o1.data(), tok.data(), wtef.data(), nullptr, B, T, C);
  ref::encoder_forward(o2.data(), tok.data(), wtef.data(), static_cast<const float*>(nullptr), B, T, C);
  EXPECT_EQ(o1, o2);
  for (int i = 0; i < B * T; ++i)
    EXPECT_TRUE(std::equal(o1.begin() + i * C, o1.begin() + (i + 1) * C, wtef.begin() + tok[i] * C)) << i;
  std::vector<float> a1(V * C, 0.f), p1(T * C, 0.f), a2 = a1, p2 = p1;
  k::encoder_backward(a1.data(), p1.data(), Rf.data(), tok.data(), B, T, C);
  ref::encoder_backward(a2.data(), p2.data(), Rf.data(), tok.data(), B, T, C);
  EXPECT_LT(max_rel_error(to_d(a1), to_d(a2)), 1e-6);
  EXPECT_LT(max_rel_error(to_d(p1), to_d(p2)), 1e-6);
}
