// Kernel correctness: every optimised CPU kernel against its naive reference (float; the LM head
// against the fp64 one), every reference backward against fp64 finite differences, and the
// AVX-512 exp against the AVX2 one.
// Tolerances: float kernels vs reference within 1e-5 relative (elementwise, layernorm) / 1e-4
// (GEMM-based, summation order differs).
#include "frugal/kernels/cpu/simd_math.h"  // first: see its note on <immintrin.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/ref.h"
#include "gradcheck.h"

namespace k = frugal::kernels;
namespace ref = frugal::kernels::ref;
using frugal::testing::max_error_rel_to_max;
using frugal::testing::max_rel_error;
using frugal::testing::numeric_gradient;
using frugal::testing::random_vector;

namespace {

std::vector<float> to_f(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

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

TEST(Kernels, LayerNormMatchesReferenceAndGradients) {
  const int N = 7, C = 24;
  auto x = random_vector(N * C, 1, 2.0), w = random_vector(C, 2), b = random_vector(C, 3);
  auto R = random_vector(N * C, 4);  // loss = Σ out ⊙ R
  // fp64 gradient check of the reference
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(out, R);
  };
  loss();
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);
  // CPU vs reference in float
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), Rf = to_f(R);
  std::vector<float> o1(N * C), m1(N), r1(N), o2(N * C), m2(N), r2(N);
  k::layernorm_forward(o1.data(), m1.data(), r1.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
  ref::layernorm_forward(o2.data(), m2.data(), r2.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
  EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5);
  std::vector<float> dx1(N * C, 0.5f), dw1(C, 0.25f), db1(C, 0.f), dx2 = dx1, dw2 = dw1, db2 = db1;
  k::layernorm_backward(dx1.data(), dw1.data(), db1.data(), Rf.data(), xf.data(), wf.data(), m1.data(), r1.data(), N, C);
  ref::layernorm_backward(dx2.data(), dw2.data(), db2.data(), Rf.data(), xf.data(), wf.data(), m2.data(), r2.data(), N, C);
  EXPECT_LT(max_rel_error(to_d(dx1), to_d(dx2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(dw1), to_d(dw2)), 1e-5);
  EXPECT_LT(max_rel_error(to_d(db1), to_d(db2)), 1e-5);
}

TEST(Kernels, MatmulMatchesReferenceAndGradients) {
  const int N = 5, C = 16, OC = 12;
  auto x = random_vector(N * C, 5), w = random_vector(OC * C, 6), b = random_vector(OC, 7);
  auto R = random_vector(N * OC, 8);
  std::vector<double> out(N * OC);
  auto loss = [&] {
    ref::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, R);
  };
  std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  ref::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC, false);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);
  auto xf = to_f(x), wf = to_f(w), bf = to_f(b), Rf = to_f(R);
  for (bool with_bias : {false, true}) {
    std::vector<float> o1(N * OC), o2(N * OC);
    k::matmul_forward(o1.data(), xf.data(), wf.data(), with_bias ? bf.data() : nullptr, N, C, OC);
    ref::matmul_forward(o2.data(), xf.data(), wf.data(), with_bias ? bf.data() : nullptr, N, C, OC);
    EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-5);
  }
  for (bool accumulate : {false, true}) {
    std::vector<float> dx1(N * C, 1.0f), dw1(OC * C, 0.5f), db1(OC, 0.25f), dx2 = dx1, dw2 = dw1, db2 = db1;
    k::matmul_backward(dx1.data(), dw1.data(), db1.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, accumulate);
    ref::matmul_backward(dx2.data(), dw2.data(), db2.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, accumulate);
    EXPECT_LT(max_rel_error(to_d(dx1), to_d(dx2)), 1e-5);
    EXPECT_LT(max_rel_error(to_d(dw1), to_d(dw2)), 1e-5);
    EXPECT_LT(max_rel_error(to_d(db1), to_d(db2)), 1e-5);
  }
  // null gradients are skipped: only dbias requested
  std::vector<float> db3(OC, 0.0f), db4(OC, 0.0f);
  k::matmul_backward(nullptr, nullptr, db3.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  ref::matmul_backward<float>(nullptr, nullptr, db4.data(), Rf.data(), xf.data(), wf.data(), N, C, OC, false);
  EXPECT_LT(max_rel_error(to_d(db3), to_d(db4)), 1e-6);
}

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
  std::vector<float> a1(V * C, 0.f), p1(T * C, 0.f), a2 = a1, p2 = p1;
  k::encoder_backward(a1.data(), p1.data(), Rf.data(), tok.data(), B, T, C);
  ref::encoder_backward(a2.data(), p2.data(), Rf.data(), tok.data(), B, T, C);
  EXPECT_LT(max_rel_error(to_d(a1), to_d(a2)), 1e-6);
  EXPECT_LT(max_rel_error(to_d(p1), to_d(p2)), 1e-6);
}

TEST(Kernels, ActivationsMatchReferenceAndGradients) {
  const size_t n = 37;  // not a multiple of 8: exercises the masked tail
  auto x = random_vector(n, 12, 4.0), u = random_vector(n, 13, 2.0), R = random_vector(n, 14);
  std::vector<double> out(n);
  auto gelu_loss = [&] { ref::gelu_forward(out.data(), x.data(), n); return dot(out, R); };
  std::vector<double> dx(n);
  ref::gelu_backward(dx.data(), R.data(), x.data(), n);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, gelu_loss)), 1e-6);
  for (int act : {0, 1}) {
    auto gated_loss = [&] { ref::gated_forward(out.data(), x.data(), u.data(), n, act); return dot(out, R); };
    std::vector<double> dg(n), du(n);
    ref::gated_backward(dg.data(), du.data(), R.data(), x.data(), u.data(), n, act);
    EXPECT_LT(max_rel_error(dg, numeric_gradient(x, gated_loss)), 1e-6);
    EXPECT_LT(max_rel_error(du, numeric_gradient(u, gated_loss)), 1e-6);
  }
  auto xf = to_f(x), uf = to_f(u), Rf = to_f(R);
  std::vector<float> o1(n), o2(n), d1(n), d2(n), e1(n), e2(n);
  k::gelu_forward(o1.data(), xf.data(), n);
  ref::gelu_forward(o2.data(), xf.data(), n);
  EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-6);
  k::gelu_backward(d1.data(), Rf.data(), xf.data(), n);
  ref::gelu_backward(d2.data(), Rf.data(), xf.data(), n);
  EXPECT_LT(max_rel_error(to_d(d1), to_d(d2)), 1e-6);
  for (auto [act, ract] : {std::pair{k::GateAct::Gelu, 0}, std::pair{k::GateAct::Silu, 1}}) {
    k::gated_forward(o1.data(), xf.data(), uf.data(), n, act);
    ref::gated_forward(o2.data(), xf.data(), uf.data(), n, ract);
    EXPECT_LT(max_rel_error(to_d(o1), to_d(o2)), 1e-6);
    k::gated_backward(d1.data(), e1.data(), Rf.data(), xf.data(), uf.data(), n, act);
    ref::gated_backward(d2.data(), e2.data(), Rf.data(), xf.data(), uf.data(), n, ract);
    EXPECT_LT(max_rel_error(to_d(d1), to_d(d2)), 1e-6);
    EXPECT_LT(max_rel_error(to_d(e1), to_d(e2)), 1e-6);
  }
}

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

TEST(Kernels, SumSquaresScaleResidualDropout) {
  const size_t n = 100003;
  auto x = to_f(random_vector(n, 21));
  double expect = 0;
  for (float v : x) expect += double(v) * v;
  EXPECT_NEAR(k::sum_squares(x.data(), n), expect, 1e-6 * expect);
  std::vector<float> y = x, y_expect(n);
  k::scale_inplace(y.data(), n, 0.5f);
  for (size_t i = 0; i < n; ++i) y_expect[i] = x[i] * 0.5f;
  EXPECT_EQ(y, y_expect);
  std::vector<float> z(n), z_expect(n);
  k::residual_forward(z.data(), x.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) z_expect[i] = x[i] + y[i];
  EXPECT_EQ(z, z_expect);
  std::vector<float> d(n, 1.0f);
  k::dropout_apply(d.data(), n, 0.25f, 42);
  size_t zeros = 0;
  for (float v : d) {
    if (v == 0.0f) ++zeros;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(double(zeros) / n, 0.25, 0.01);
  std::vector<float> d2(n, 1.0f);
  k::dropout_apply(d2.data(), n, 0.25f, 42);
  EXPECT_EQ(d, d2) << "the mask is a pure function of (key, index)";
}

namespace {

// exp of 16 floats with the AVX-512 twin (the caller checks the CPU).
__attribute__((target("avx512f"))) void exp512_of(const float* x, float* y) {
  _mm512_storeu_ps(y, k::cpu::exp512(_mm512_loadu_ps(x)));
}

}  // namespace

// The AVX-512 exp gives the same bits as the AVX2 one on every lane, over the whole clamped range
// and beyond it (the attention kernels' softmax uses either).
TEST(SimdMath, Exp512SameBitsAsExp256) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "this CPU has no AVX-512F";
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0371f) x.push_back(v);
  x.resize((x.size() + 15) / 16 * 16, 88.5f);
  std::vector<float> want(x.size()), got(x.size());
  for (size_t i = 0; i < x.size(); i += 8)
    _mm256_storeu_ps(want.data() + i, k::cpu::exp256(_mm256_loadu_ps(x.data() + i)));
  for (size_t i = 0; i < x.size(); i += 16) exp512_of(x.data() + i, got.data() + i);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0) << "x = " << x[i];
    if (std::fabs(x[i]) < 80.0f) {
      ASSERT_NEAR(got[i] / std::exp(x[i]), 1.0f, 1e-6f) << x[i];
    }
  }
}
