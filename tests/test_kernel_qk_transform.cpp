// The qk_transform kernel family (QK-norm and rotary position embeddings): the reference's backward
// against finite differences in fp64 for each transform alone and both; the CPU kernel against the
// reference (forward from an offset position, backward); the properties that define the transforms
// (a rotation keeps each head's norm and makes q·k depend on the positions' difference only, the
// norm leaves rms 1) and the value part untouched.
#include <gtest/gtest.h>

#include <cmath>

#include "frugal/kernels/ref/qk_transform_ref.h"
#include "kernel_test.h"

namespace {

constexpr int B = 2, T = 5, NH = 3, HS = 8, C = NH * HS;

k::QkTransform transform(bool norm, bool rotary) { return {.norm = norm, .rotary = rotary, .rope_base = 100.0f}; }

}  // namespace

TEST(Kernels, QkTransformBackwardMatchesFiniteDifferences) {
  for (const auto& [norm, rotary] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string(norm ? "norm " : "") + (rotary ? "rotary" : ""));
    const k::QkTransform t = transform(norm, rotary);
    std::vector<double> x = random_vector(size_t(B) * T * 3 * C, 3, 1.5);
    const std::vector<double> R = random_vector(x.size(), 4);
    std::vector<double> y(x.size()), inv_rms(size_t(B) * T * 2 * NH);
    const auto loss = [&] {
      y = x;
      ref::qk_transform_forward(y.data(), inv_rms.data(), B, T, 0, C, NH, t);
      return dot(y, R);
    };
    loss();
    std::vector<double> d = R;
    ref::qk_transform_backward(d.data(), y.data(), inv_rms.data(), B, T, C, NH, t);
    const std::vector<double> numeric = numeric_gradient(x, loss);
    EXPECT_LT(max_rel_error(d, numeric), 1e-7);
  }
}

TEST(Kernels, QkTransformMatchesReference) {
  for (const auto& [norm, rotary] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string(norm ? "norm " : "") + (rotary ? "rotary" : ""));
    const k::QkTransform t = transform(norm, rotary);
    for (int pos0 : {0, 7}) {
      const std::vector<float> x = to_f(random_vector(size_t(B) * T * 3 * C, 5 + pos0, 2.0));
      std::vector<float> got = x, want = x, r_got(size_t(B) * T * 2 * NH), r_want(r_got.size());
      k::qk_transform_forward(got.data(), r_got.data(), B, T, pos0, C, NH, t);
      ref::qk_transform_forward(want.data(), r_want.data(), B, T, pos0, C, NH, t);
      EXPECT_LT(max_error_rel_to_max(got.data(), want.data(), got.size()), 1e-6) << pos0;
      if (norm) {
        EXPECT_LT(max_error_rel_to_max(r_got.data(), r_want.data(), r_got.size()), 1e-6);
      }
      for (size_t row = 0; row < size_t(B) * T; ++row)  // values untouched, bit for bit
        for (int c = 2 * C; c < 3 * C; ++c) ASSERT_EQ(got[row * 3 * C + c], x[row * 3 * C + c]);
      if (pos0 != 0) continue;
      const std::vector<float> dy = to_f(random_vector(x.size(), 9));
      std::vector<float> d_got = dy, d_want = dy;
      k::qk_transform_backward(d_got.data(), got.data(), r_got.data(), B, T, C, NH, t);
      ref::qk_transform_backward(d_want.data(), want.data(), r_want.data(), B, T, C, NH, t);
      EXPECT_LT(max_error_rel_to_max(d_got.data(), d_want.data(), d_got.size()), 1e-5);
    }
  }
}

// Rotary: every head keeps its norm, and the score of a query at position m with a key at
// position n depends on m - n only; QK-norm: every head has rms 1 (to within the epsilon).
TEST(Kernels, QkTransformKeepsNormsAndRelativePositions) {
  const int T1 = 12;
  std::vector<double> qkv(size_t(T1) * 3 * C), inv_rms(size_t(T1) * 2 * NH);
  const std::vector<double> q = random_vector(HS, 1), key = random_vector(HS, 2);
  for (int t = 0; t < T1; ++t)  // the same query and key vectors at every position, head 0
    for (int i = 0; i < HS; ++i) qkv[size_t(t) * 3 * C + i] = q[i], qkv[size_t(t) * 3 * C + C + i] = key[i];
  std::vector<double> rotated = qkv;
  ref::qk_transform_forward(rotated.data(), inv_rms.data(), 1, T1, 0, C, NH, transform(false, true));
  const auto score = [&](int m, int n) {
    double s = 0;
    for (int i = 0; i < HS; ++i) s += rotated[size_t(m) * 3 * C + i] * rotated[size_t(n) * 3 * C + C + i];
    return s;
  };
  for (int m = 3; m < T1; ++m) EXPECT_NEAR(score(m, m - 3), score(3, 0), 1e-12) << m;
  EXPECT_GT(std::fabs(score(5, 0) - score(3, 0)), 1e-3);  // and it does depend on the difference
  for (int t = 0; t < T1; ++t) {
    double before = 0, after = 0;
    for (int i = 0; i < HS; ++i) before += q[i] * q[i], after += rotated[size_t(t) * 3 * C + i] * rotated[size_t(t) * 3 * C + i];
    EXPECT_NEAR(after, before, 1e-12) << t;
  }
  std::vector<double> normed = qkv;
  ref::qk_transform_forward(normed.data(), inv_rms.data(), 1, T1, 0, C, NH, transform(true, false));
  double squares = 0;
  for (int i = 0; i < HS; ++i) squares += normed[C + i] * normed[C + i];
  EXPECT_NEAR(squares / HS, 1.0, 1e-5);
}
