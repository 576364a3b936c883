// The activations kernel family (GELU, ReLU², GEGLU, SwiGLU): the CPU kernels against the naive
// reference, the reference backward against fp64 finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "frugal/kernels/ref/activations_ref.h"
#include "kernel_test.h"

TEST(Kernels, ActivationsMatchReferenceAndGradients) {
  const size_t n = 37;  // not a multiple of 8: exercises the masked tail
  auto x = random_vector(n, 12, 4.0), u = random_vector(n, 13, 2.0), R = random_vector(n, 14);
  std::vector<double> out(n);
  auto gelu_loss = [&] { ref::gelu_forward(out.data(), x.data(), n); return dot(out, R); };
  std::vector<double> dx(n);
  ref::gelu_backward(dx.data(), R.data(), x.data(), n);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, gelu_loss)), 1e-6);
  auto relu2_loss = [&] { ref::relu2_forward(out.data(), x.data(), n); return dot(out, R); };
  ref::relu2_backward(dx.data(), R.data(), x.data(), n);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, relu2_loss)), 1e-6);
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
  k::relu2_forward(o1.data(), xf.data(), n);
  ref::relu2_forward(o2.data(), xf.data(), n);
  EXPECT_EQ(o1, o2);
  k::relu2_backward(d1.data(), Rf.data(), xf.data(), n);
  ref::relu2_backward(d2.data(), Rf.data(), xf.data(), n);
  EXPECT_EQ(d1, d2);
  EXPECT_GT(std::count(o1.begin(), o1.end(), 0.0f), 0) << "some inputs are negative";
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

// The forwards writing bf16 (the MLP projection's input under train.precision = "bf16"): on every
// instruction set and the reference path, f32_to_bf16 of the fp32 forward bit for bit, and within
// half a bf16 step (2^-8 relative) plus 1e-6 of the fp64 reference. Lengths: a masked tail alone
// (37), several of the optimised kernels' 256-float rounding tiles and a tail (2051), and enough
// for threads, ending in a part tile and a tail (40003).
TEST(Kernels, ActivationsBf16OutputIsTheRoundedFp32Output) {
  for (const size_t n : {size_t(37), size_t(2051), size_t(40003)}) {
    SCOPED_TRACE(n);
    const auto x = random_vector(n, 31, 4.0), u = random_vector(n, 32, 2.0);
    const auto xf = to_f(x), uf = to_f(u);
    std::vector<double> gelu(n), relu2(n), geglu(n), swiglu(n);
    ref::gelu_forward(gelu.data(), x.data(), n);
    ref::relu2_forward(relu2.data(), x.data(), n);
    ref::gated_forward(geglu.data(), x.data(), u.data(), n, 0);
    ref::gated_forward(swiglu.data(), x.data(), u.data(), n, 1);
    on_every_isa([&] {
      std::vector<float> fp32(n);
      std::vector<k::bf16> want(n), got(n);
      const auto check = [&](const std::vector<double>& exact, const char* what) {
        SCOPED_TRACE(what);
        k::f32_to_bf16(want.data(), fp32.data(), n);
        EXPECT_TRUE(got == want);
        EXPECT_EQ(first_outside_bf16_rounding(got, exact, 1e-6), -1);
      };
      k::gelu_forward(fp32.data(), xf.data(), n);
      k::gelu_forward_bf16(got.data(), xf.data(), n);
      check(gelu, "gelu");
      k::relu2_forward(fp32.data(), xf.data(), n);
      k::relu2_forward_bf16(got.data(), xf.data(), n);
      check(relu2, "relu2");
      k::gated_forward(fp32.data(), xf.data(), uf.data(), n, k::GateAct::Gelu);
      k::gated_forward_bf16(got.data(), xf.data(), uf.data(), n, k::GateAct::Gelu);
      check(geglu, "geglu");
      k::gated_forward(fp32.data(), xf.data(), uf.data(), n, k::GateAct::Silu);
      k::gated_forward_bf16(got.data(), xf.data(), uf.data(), n, k::GateAct::Silu);
      check(swiglu, "swiglu");
    }, /*with_reference=*/true);
  }
}
