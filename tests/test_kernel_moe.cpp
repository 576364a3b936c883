// The moe kernel family (router top-k, permute / unpermute, grouped linear): the reference
// backwards against fp64 finite differences, the CPU kernels against the reference, and the
// router's choice rule (largest probability plus bias, ties to the lower expert index); the
// grouped linear on bf16 weights against its reference and the fp32 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "frugal/kernels/ref/moe_ref.h"
#include "kernel_test.h"

namespace {

constexpr int N = 13, E = 6, K = 2, C = 12, OC = 10, R = N * K;

// A routing of N tokens to K distinct experts each: pos (N, K) a permutation of the R rows
// grouped by expert (as the model lays them out), src its inverse's tokens, offsets (E + 1).
struct Routing {
  std::vector<int32_t> expert, pos, src, offsets;
};
Routing routing_of(std::vector<int32_t> expert) {
  Routing r{std::move(expert), std::vector<int32_t>(R), std::vector<int32_t>(R), std::vector<int32_t>(E + 1, 0)};
  for (int32_t e : r.expert) ++r.offsets[e + 1];
  std::partial_sum(r.offsets.begin(), r.offsets.end(), r.offsets.begin());
  std::vector<int32_t> next(r.offsets.begin(), r.offsets.end() - 1);
  for (int i = 0; i < R; ++i) {
    r.pos[i] = next[r.expert[i]]++;
    r.src[r.pos[i]] = i / K;
  }
  return r;
}
// Two distinct experts per token among the first E - 1: the last expert receives no rows.
Routing sample_routing() {
  std::vector<int32_t> expert(R);
  for (int n = 0; n < N; ++n) expert[n * K] = (n * 2) % (E - 1), expert[n * K + 1] = (n * 2 + 1 + n % 3) % (E - 1);
  return routing_of(expert);
}

}  // namespace

TEST(Kernels, MoeRouterPicksTopKWithBiasAndTiesToTheLowerIndex) {
  // equal logits: every expert ties, the lowest indices win
  std::vector<float> logits(2 * E, 0.5f), probs(2 * E), lse(2), weight(2 * 3);
  std::vector<int32_t> expert(2 * 3);
  k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), nullptr, 2, E, 3);
  EXPECT_EQ(expert, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  for (float w : weight) EXPECT_FLOAT_EQ(w, 1.0f / 3);
  // a bias steers the choice (expert 5 first, then the tie 0 vs 3 goes to 0) but not the weights
  const std::vector<float> bias = {0, 0, 0, 0, 0, 1};
  k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), bias.data(), 2, E, 3);
  EXPECT_EQ(expert, (std::vector<int32_t>{5, 0, 1, 5, 0, 1}));
  for (float w : weight) EXPECT_FLOAT_EQ(w, 1.0f / 3);
  // distinct logits: best first
  logits = {0.1f, 2.0f, -1.0f, 3.0f, 0.0f, 1.0f};
  k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), nullptr, 1, E, 3);
  EXPECT_EQ(std::vector<int32_t>(expert.begin(), expert.begin() + 3), (std::vector<int32_t>{3, 1, 5}));
  EXPECT_NEAR(weight[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0) + std::exp(1.0)), 1e-6);
}

TEST(Kernels, MoeRouterMatchesReferenceAndGradients) {
  auto logits = random_vector(size_t(N) * E, 21, 2.0), dweight = random_vector(size_t(N) * K, 22),
       dprobs = random_vector(E, 23), R1 = random_vector(size_t(N) * E, 24), R2 = random_vector(N, 25);
  const double dlse = 0.3;
  std::vector<double> probs(size_t(N) * E), lse(N), weight(size_t(N) * K);
  std::vector<int32_t> expert(size_t(N) * K);
  ref::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(),
                          static_cast<const double*>(nullptr), N, E, K);
  // L = <dweight, weight> + <dprobs (each row), probs> + dlse/2 Σ lse², with the choice fixed
  const std::vector<int32_t> chosen = expert;
  auto loss = [&] {
    std::vector<int32_t> ex(expert.size());
    ref::moe_router_forward(probs.data(), lse.data(), ex.data(), weight.data(), logits.data(),
                            static_cast<const double*>(nullptr), N, E, K);
    EXPECT_EQ(ex, chosen) << "the finite differences must not change the choice";
    double l = dot(weight, dweight);
    for (int n = 0; n < N; ++n)
      for (int e = 0; e < E; ++e) l += probs[size_t(n) * E + e] * dprobs[e];
    for (double x : lse) l += dlse / 2 * x * x;
    return l;
  };
  std::vector<double> dlogits(size_t(N) * E);
  loss();
  ref::moe_router_backward(dlogits.data(), dweight.data(), probs.data(), lse.data(), expert.data(),
                           weight.data(), dprobs.data(), dlse, N, E, K);
  EXPECT_LT(max_rel_error(dlogits, numeric_gradient(logits, loss)), 1e-6);

  auto lf = to_f(logits), gf = to_f(dweight), pf = to_f(dprobs);
  std::vector<float> p1(lf.size()), p2(lf.size()), s1(N), s2(N), w1(size_t(N) * K), w2(size_t(N) * K);
  std::vector<int32_t> e1(size_t(N) * K), e2(size_t(N) * K);
  const std::vector<float> bias = to_f(random_vector(E, 26, 0.1));
  k::moe_router_forward(p1.data(), s1.data(), e1.data(), w1.data(), lf.data(), bias.data(), N, E, K);
  ref::moe_router_forward(p2.data(), s2.data(), e2.data(), w2.data(), lf.data(), bias.data(), N, E, K);
  EXPECT_EQ(e1, e2);
  EXPECT_LT(max_rel_error(to_d(p1), to_d(p2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(s1), to_d(s2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(w1), to_d(w2)), 1e-5);
  std::vector<float> d1(lf.size()), d2(lf.size());
  k::moe_router_backward(d1.data(), gf.data(), p2.data(), s2.data(), e2.data(), w2.data(), pf.data(), 0.3f, N, E, K);
  ref::moe_router_backward(d2.data(), gf.data(), p2.data(), s2.data(), e2.data(), w2.data(), pf.data(), 0.3f, N, E, K);
  EXPECT_LT(max_error_rel_to_max(d1.data(), d2.data(), d1.size()), 1e-5);
}

TEST(Kernels, MoePermuteAndCombineMatchReferenceAndGradients) {
  const Routing r = sample_routing();
  auto x = random_vector(size_t(N) * C, 31), y = random_vector(size_t(R) * C, 32),
       w = random_vector(size_t(N) * K, 33), dout = random_vector(size_t(N) * C, 34),
       dxp = random_vector(size_t(R) * C, 35);
  // the combine: out = Σ_j w_nj y[pos_nj]; its gradients in y and w
  std::vector<double> out(size_t(N) * C);
  auto combine_loss = [&] {
    ref::moe_unpermute(out.data(), y.data(), r.pos.data(), w.data(), N, K, C, false);
    return dot(out, dout);
  };
  std::vector<double> dy(y.size()), dw(w.size());
  ref::moe_unpermute_backward(dy.data(), dw.data(), dout.data(), y.data(), r.pos.data(), w.data(), N, K, C);
  EXPECT_LT(max_rel_error(dy, numeric_gradient(y, combine_loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, combine_loss)), 1e-6);
  // the gather's gradient is the unweighted combine
  std::vector<double> xp(y.size()), dx(x.size());
  auto gather_loss = [&] {
    ref::moe_permute(xp.data(), x.data(), r.src.data(), R, C);
    return dot(xp, dxp);
  };
  ref::moe_unpermute(dx.data(), dxp.data(), r.pos.data(), static_cast<const double*>(nullptr), N, K, C, false);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, gather_loss)), 1e-6);

  auto xf = to_f(x), yf = to_f(y), wf = to_f(w), df = to_f(dout);
  std::vector<float> a(y.size()), b(y.size());
  k::moe_permute(a.data(), xf.data(), r.src.data(), R, C);
  ref::moe_permute(b.data(), xf.data(), r.src.data(), R, C);
  EXPECT_EQ(a, b);
  for (bool accumulate : {false, true}) {
    std::vector<float> o1(df), o2(df);
    k::moe_unpermute(o1.data(), yf.data(), r.pos.data(), wf.data(), N, K, C, accumulate);
    ref::moe_unpermute(o2.data(), yf.data(), r.pos.data(), wf.data(), N, K, C, accumulate);
    EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5);
  }
  std::vector<float> g1(y.size()), g2(y.size()), v1(w.size()), v2(w.size());
  k::moe_unpermute_backward(g1.data(), v1.data(), df.data(), yf.data(), r.pos.data(), wf.data(), N, K, C);
  ref::moe_unpermute_backward(g2.data(), v2.data(), df.data(), yf.data(), r.pos.data(), wf.data(), N, K, C);
  EXPECT_EQ(g1, g2);
  EXPECT_LT(max_rel_error(to_d(v1), to_d(v2)), 1e-5);
}

TEST(Kernels, MoeGroupedLinearMatchesReferenceAndGradients) {
  const Routing r = sample_routing();
  ASSERT_EQ(r.offsets[E - 1], r.offsets[E]) << "the last expert receives no rows in this routing";
  auto x = random_vector(size_t(R) * C, 41), W = random_vector(size_t(E) * OC * C, 42),
       b = random_vector(size_t(E) * OC, 43), dout = random_vector(size_t(R) * OC, 44);
  std::vector<double> out(size_t(R) * OC);
  auto loss = [&] {
    ref::moe_grouped_forward(out.data(), x.data(), W.data(), b.data(), r.offsets.data(), E, C, OC);
    return dot(out, dout);
  };
  std::vector<double> dx(x.size()), dW(W.size(), 0.0), db(b.size(), 0.0);
  ref::moe_grouped_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), r.offsets.data(),
                            E, C, OC, false);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dW, numeric_gradient(W, loss)), 1e-6);
  EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);

  auto xf = to_f(x), Wf = to_f(W), bf = to_f(b), df = to_f(dout);
  std::vector<float> o1(out.size()), o2(out.size());
  k::moe_grouped_forward(o1.data(), xf.data(), Wf.data(), bf.data(), r.offsets.data(), E, C, OC);
  ref::moe_grouped_forward(o2.data(), xf.data(), Wf.data(), bf.data(), r.offsets.data(), E, C, OC);
  EXPECT_LT(max_error_rel_to_max(o1.data(), o2.data(), o1.size()), 1e-5);
  for (bool accumulate : {false, true}) {
    std::vector<float> x1(xf), x2(xf), W1(Wf), W2(Wf), b1(bf), b2(bf);
    k::moe_grouped_backward(x1.data(), W1.data(), b1.data(), df.data(), xf.data(), Wf.data(), r.offsets.data(),
                            E, C, OC, accumulate);
    ref::moe_grouped_backward(x2.data(), W2.data(), b2.data(), df.data(), xf.data(), Wf.data(), r.offsets.data(),
                              E, C, OC, accumulate);
    EXPECT_LT(max_error_rel_to_max(x1.data(), x2.data(), x1.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(W1.data(), W2.data(), W1.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(b1.data(), b2.data(), b1.size()), 1e-5);
  }
}

// The grouped linear on the experts' bf16 working copy: against its reference (the fp32 one on
// rounded rows and widened weights: 1e-5) and against the fp32 grouped linear (1e-2: the operands'
// rounding); the bias gradient is the fp32 one's.
TEST(Kernels, MoeGroupedLinearBf16MatchesItsReferenceAndTheFp32One) {
  const Routing r = sample_routing();
  const auto x = to_f(random_vector(size_t(R) * C, 51)), W = to_f(random_vector(size_t(E) * OC * C, 52)),
             b = to_f(random_vector(size_t(E) * OC, 53)), dout = to_f(random_vector(size_t(R) * OC, 54));
  std::vector<k::bf16> Wb(W.size());
  k::f32_to_bf16(Wb.data(), W.data(), W.size());
  std::vector<float> o1(size_t(R) * OC), o2(o1.size()), o3(o1.size());
  k::moe_grouped_forward_bf16(o1.data(), x.data(), Wb.data(), b.data(), r.offsets.data(), E, C, OC);
  ref::moe_grouped_forward_bf16(o2.data(), x.data(), Wb.data(), b.data(), r.offsets.data(), E, C, OC);
  k::moe_grouped_forward(o3.data(), x.data(), W.data(), b.data(), r.offsets.data(), E, C, OC);
  EXPECT_LT(max_error_rel_to_max(o1.data(), o2.data(), o1.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(o1.data(), o3.data(), o1.size()), 1e-2);
  EXPECT_GT(max_error_rel_to_max(o1.data(), o3.data(), o1.size()), 0.0) << "the operands were not rounded";
  for (bool accumulate : {false, true}) {
    std::vector<float> x1(x), x2(x), x3(x), W1(W), W2(W), W3(W), b1(b), b2(b), b3(b);
    k::moe_grouped_backward_bf16(x1.data(), W1.data(), b1.data(), dout.data(), x.data(), Wb.data(),
                                 r.offsets.data(), E, C, OC, accumulate);
    ref::moe_grouped_backward_bf16(x2.data(), W2.data(), b2.data(), dout.data(), x.data(), Wb.data(),
                                   r.offsets.data(), E, C, OC, accumulate);
    k::moe_grouped_backward(x3.data(), W3.data(), b3.data(), dout.data(), x.data(), W.data(), r.offsets.data(), E,
                            C, OC, accumulate);
    EXPECT_LT(max_error_rel_to_max(x1.data(), x2.data(), x1.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(W1.data(), W2.data(), W1.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(b1.data(), b2.data(), b1.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(x1.data(), x3.data(), x1.size()), 1e-2);
    EXPECT_LT(max_error_rel_to_max(W1.data(), W3.data(), W1.size()), 1e-2);
    EXPECT_LT(max_error_rel_to_max(b1.data(), b3.data(), b1.size()), 1e-5);
  }
}
