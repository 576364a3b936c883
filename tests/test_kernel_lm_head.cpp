// The lm_head kernel family (fused LM head + softmax cross-entropy): the CPU kernel against the
// fp64 reference, the reference backward against fp64 finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/ref/lm_head_ref.h"
#include "kernel_test.h"

namespace {

// The optimised LM head + cross-entropy against the fp64 reference (a float reference's own
// summation error over a large vocabulary is larger than the kernel's) on weights of Vp rows (V
// real): losses, input gradient, and the weight gradient accumulated onto 0.5, whose vocabulary
// padding rows [V, Vp) the kernel must leave untouched.
void expect_lm_head_matches_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<int32_t>& tgt, int N, int C, int V, int Vp) {
  std::vector<float> l1(N), dx1(size_t(N) * C), dw1(size_t(Vp) * C, 0.5f);
  k::lm_head_cross_entropy(l1.data(), dx1.data(), dw1.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.5f);
  std::vector<double> l2(N), dx2(dx1.size()), dw2(dw1.size(), 0.0);
  ref::lm_head_cross_entropy(l2.data(), dx2.data(), dw2.data(), to_d(x).data(), to_d(w).data(), tgt.data(), N, C,
                             V, 0.5);
  EXPECT_LT(max_error_rel_to_max(l1.data(), l2.data(), l2.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(dx1.data(), dx2.data(), dx2.size()), 1e-5);
  std::vector<double> g1(to_d(dw1));  // the gradient alone, without the 0.5 it was added to
  for (double& g : g1) g -= 0.5;
  EXPECT_LT(max_error_rel_to_max(g1.data(), dw2.data(), dw2.size()), 1e-5);
  for (size_t i = size_t(V) * C; i < dw1.size(); ++i) ASSERT_EQ(dw1[i], 0.5f) << "padding row " << i / C;
}

}  // namespace

TEST(Kernels, LmHeadCrossEntropyMatchesReferenceAndGradients) {
  const int N = 6, C = 16, V = 11, Vp = 64;
  auto x = random_vector(N * C, 15), w = random_vector(Vp * C, 16);
  std::vector<int32_t> tgt = {3, 0, 10, -1, 7, 7};
  std::vector<double> losses(N);
  auto loss = [&] {
    ref::lm_head_cross_entropy<double>(losses.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 0.0);
    double s = 0;
    for (double l : losses) s += l;
    return s;
  };
  std::vector<double> dx(N * C), dw(Vp * C, 0.0);
  ref::lm_head_cross_entropy(losses.data(), dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V, 1.0);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  auto xf = to_f(x), wf = to_f(w);
  expect_lm_head_matches_reference(xf, wf, tgt, N, C, V, Vp);
  std::vector<float> with_grad(N), forward_only(N), dx1(N * C), dw1(Vp * C, 0.0f);
  k::lm_head_cross_entropy(with_grad.data(), dx1.data(), dw1.data(), xf.data(), wf.data(), tgt.data(), N, C, V, 0.5f);
  k::lm_head_cross_entropy(forward_only.data(), nullptr, nullptr, xf.data(), wf.data(), tgt.data(), N, C, V, 0.0f);
  EXPECT_EQ(with_grad, forward_only);
}

// The kernel works in chunks of kLogitsBudget / V rows (8M logits, lm_head.cpp): V = 65537 gives
// chunks of 127 rows, so N = 257 runs two full chunks and a partial one of 3 rows. dW accumulates
// across chunks; rows and targets (some ignored, -1) must be offset per chunk.
TEST(Kernels, LmHeadCrossEntropyOverSeveralChunksMatchesReference) {
  const int N = 257, C = 8, V = 65537, Vp = 65600;
  auto xf = to_f(random_vector(size_t(N) * C, 22, 2.0)), wf = to_f(random_vector(size_t(Vp) * C, 23));
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i % 17 == 5 ? -1 : static_cast<int32_t>((i * 7919) % V);
  expect_lm_head_matches_reference(xf, wf, tgt, N, C, V, Vp);
}
