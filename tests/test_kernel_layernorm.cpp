// The layernorm kernel family: the CPU kernels against the naive reference (within 1e-5
// relative), the reference backward against fp64 finite differences.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/kernels/ref/layernorm_ref.h"
#include "kernel_test.h"

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

// The forward writing bf16 (the linears' input under train.precision = "bf16"): on every
// instruction set and the reference path its bf16 output is f32_to_bf16 of the fp32 forward's output bit for bit, its fp32
// output (when asked) and statistics are the fp32 forward's; against the fp64 reference each
// element is within half a bf16 step (2^-8 relative) plus 4e-5 (1e-5 of the output's scale, ~4).
TEST(Kernels, LayerNormBf16OutputIsTheRoundedFp32Output) {
  const int N = 9, C = 40;
  auto x = random_vector(N * C, 21, 3.0), w = random_vector(C, 22), b = random_vector(C, 23);
  std::vector<double> exact(N * C), mean(N), rstd(N);
  ref::layernorm_forward(exact.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  const auto xf = to_f(x), wf = to_f(w), bf = to_f(b);
  on_every_isa([&] {
    for (const float* bias : {bf.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> o(N * C), m(N), r(N), o_both(N * C), m16(N), r16(N);
      k::layernorm_forward(o.data(), m.data(), r.data(), xf.data(), wf.data(), bias, N, C, 1e-5f);
      std::vector<k::bf16> want(N * C), got(N * C), got_both(N * C);
      k::f32_to_bf16(want.data(), o.data(), o.size());
      k::layernorm_forward_bf16(got.data(), nullptr, m16.data(), r16.data(), xf.data(), wf.data(), bias, N, C, 1e-5f);
      EXPECT_TRUE(got == want);
      EXPECT_EQ(m16, m);
      EXPECT_EQ(r16, r);
      k::layernorm_forward_bf16(got_both.data(), o_both.data(), m16.data(), r16.data(), xf.data(), wf.data(), bias,
                                N, C, 1e-5f);
      EXPECT_TRUE(got_both == want);
      EXPECT_EQ(o_both, o);
      if (bias) {
        EXPECT_EQ(first_outside_bf16_rounding(got, exact, 4e-5), -1);
      }
    }
    // With a zero weight the output is the bias: the rounding of ties (to even), NaN, infinities,
    // the largest float and subnormals is the reference's (ref::to_bf16) bit for bit.
    std::vector<float> bias(C, 1.0f), zero(C, 0.0f), m(N), r(N);
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f800000u, 0xff800000u,
                                0x7f800001u, 0x7fc00000u, 0x7f7fffffu, 0x00018000u, 0xbf808000u, 0xbf818000u};
    for (size_t c = 0; c < std::size(special); ++c) std::memcpy(&bias[c], &special[c], sizeof(float));
    std::vector<k::bf16> got(N * C);
    k::layernorm_forward_bf16(got.data(), nullptr, m.data(), r.data(), xf.data(), zero.data(), bias.data(), N, C,
                              1e-5f);
    for (int i = 0; i < N * C; ++i)
      ASSERT_EQ(uint16_t(got[i]), uint16_t(ref::to_bf16(bias[i % C]))) << "element " << i;
  }, /*with_reference=*/true);
}
