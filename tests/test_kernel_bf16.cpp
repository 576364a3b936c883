// The bf16 kernel family: the conversions bit for bit against the reference's rounding (ties to
// even, NaN, infinities, subnormals) on every instruction set, and the GEMMs on bf16 operands
// against the reference (within 1e-5 relative: exact products, sums in another order) and against
// fp32 GEMMs on the unrounded operands (within 1e-2: the rounding of the operands, 2^-9 each).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "frugal/kernels/dispatch.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "kernel_test.h"

namespace {

using k::bf16;

uint16_t bits(bf16 x) { return static_cast<uint16_t>(x); }

std::vector<bf16> rounded(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  k::f32_to_bf16(out.data(), x.data(), x.size());
  return out;
}

}  // namespace

TEST(KernelBf16, ReferenceRoundsToNearestEven) {
  const auto from_bits = [](uint32_t u) { return std::bit_cast<float>(u); };
  EXPECT_EQ(bits(ref::to_bf16(1.0f)), 0x3f80);
  EXPECT_EQ(bits(ref::to_bf16(from_bits(0x3f808000))), 0x3f80);  // a tie: stays even
  EXPECT_EQ(bits(ref::to_bf16(from_bits(0x3f818000))), 0x3f82);  // a tie: up to even
  EXPECT_EQ(bits(ref::to_bf16(from_bits(0x3f808001))), 0x3f81);  // above the tie
  EXPECT_EQ(bits(ref::to_bf16(from_bits(0x3f807fff))), 0x3f80);  // below it
  EXPECT_EQ(bits(ref::to_bf16(-2.0f)), 0xc000);
  EXPECT_EQ(bits(ref::to_bf16(std::numeric_limits<float>::infinity())), 0x7f80);
  EXPECT_EQ(bits(ref::to_bf16(std::numeric_limits<float>::max())), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(ref::to_f32(ref::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(ref::to_f32(ref::to_bf16(from_bits(0x7f800001)))));  // a NaN whose top bits are inf's
  EXPECT_EQ(bits(ref::to_bf16(from_bits(0x00018000))), 0x0002);  // subnormals round the same way
  EXPECT_EQ(ref::to_f32(bf16(0x3fc0)), 1.5f);
}

TEST(KernelBf16, ConversionsMatchTheReferenceBitForBit) {
  std::vector<float> x = to_f(random_vector(100003, 3));
  for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-39f;  // subnormals
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                     0x7f7fffffu, 0x80000000u, 0x00000001u})
    x.push_back(std::bit_cast<float>(u));
  std::vector<bf16> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = ref::to_bf16(x[i]);
  on_every_isa([&] {
    const std::vector<bf16> got = rounded(x);
    std::vector<float> back(x.size());
    k::bf16_to_f32(back.data(), got.data(), got.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(bits(got[i]), bits(expected[i])) << "element " << i << " = " << x[i];
      const float exact = ref::to_f32(expected[i]);
      ASSERT_TRUE(std::bit_cast<uint32_t>(back[i]) == std::bit_cast<uint32_t>(exact)) << "element " << i;
    }
  });
}

// Stochastic rounding (kernels/bf16_rounding.h, train.bf16_rounding): on every path (the
// reference's too) round_to_bf16 gives the reference's bits, element by element from each element's
// 64-bit index, over a length that is no multiple of 8 and whose indices cross 2^32; each result is
// one of the two bf16 values around x (x itself when exact), NaN stays NaN and ±inf and the
// signed zeros stay; and the nearest rounding is f32_to_bf16's bit for bit.
TEST(KernelBf16, StochasticRoundingMatchesTheReferenceBitForBit) {
  std::vector<float> x = to_f(random_vector(100003, 5));
  for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-39f;  // subnormals
  for (uint32_t u : {0x3f808000u, 0x3f800000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                     0x7f7fffffu, 0x80000000u, 0x00000000u, 0x00000001u})
    x.push_back(std::bit_cast<float>(u));
  const k::Bf16Rounding rounding{.stochastic = true, .seed = 42, .first = (uint64_t(1) << 32) - 40000};
  std::vector<bf16> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = ref::to_bf16_stochastic(x[i], rounding.seed, rounding.first + i);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(ref::to_f32(expected[i]))) << "element " << i;
    } else {
      const uint16_t down = uint16_t(u >> 16), got = bits(expected[i]);
      EXPECT_TRUE(got == down || (got == down + 1 && (u & 0xffffu) != 0)) << "element " << i;
    }
  }
  on_every_isa([&] {
    std::vector<bf16> got(x.size()), nearest(x.size());
    k::round_to_bf16(got.data(), x.data(), x.size(), rounding);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits(got[i]), bits(expected[i])) << "element " << i;
    k::round_to_bf16(nearest.data(), x.data(), x.size(), {.stochastic = false, .seed = 42});
    EXPECT_TRUE(nearest == rounded(x));
  }, /*with_reference=*/true);
}

// Stochastic rounding is unbiased: each value below, rounded at 2^20 indices (a subnormal, a
// binade's top, values near either neighbour, negative ones), rounds up with the probability of
// its cut-off fraction p = (low 16 bits) / 2^16 within 5 standard deviations (sqrt(p(1-p)/n),
// about 5e-4 at most), so the mean of the roundings is x within 5 such deviations of a bf16 step;
// an exact bf16 value never moves; and another seed gives other bits.
TEST(KernelBf16, StochasticRoundingIsUnbiased) {
  const size_t n = size_t(1) << 20;
  for (uint32_t u : {0x3f80'4ccdu, 0xc049'0fdbu, 0x3a83'126fu, 0x3f7f'ff00u, 0x0000'0123u, 0x3f80'0001u,
                     0xbf80'fff0u, 0x4120'0000u}) {
    const float value = std::bit_cast<float>(u);
    SCOPED_TRACE(value);
    const std::vector<float> x(n, value);
    std::vector<bf16> got(n), other(n);
    k::round_to_bf16(got.data(), x.data(), n, {.stochastic = true, .seed = 9, .first = 12345});
    k::round_to_bf16(other.data(), x.data(), n, {.stochastic = true, .seed = 10, .first = 12345});
    const uint16_t down = uint16_t(u >> 16);
    const double p = double(u & 0xffffu) / 65536.0;
    size_t up = 0;
    double sum = 0;
    for (const bf16 b : got) {
      ASSERT_TRUE(bits(b) == down || bits(b) == down + 1);
      up += bits(b) == down + 1;
      sum += ref::to_f32(b);
    }
    const double sigma = std::sqrt(p * (1 - p) / double(n));
    EXPECT_LE(std::fabs(double(up) / double(n) - p), 5 * sigma + 1e-12);
    const double step = std::fabs(double(ref::to_f32(bf16(down + 1))) - double(ref::to_f32(bf16(down))));
    EXPECT_LE(std::fabs(sum / double(n) - double(value)), 5 * sigma * step + 1e-12 * std::fabs(value));
    if (p > 0) {
      EXPECT_FALSE(got == other);
    }
  }
}

// A linear's output gradient rounded with its bias gradient in one pass: on every path (the
// reference's too) the rounding is f32_to_bf16's and the bias gradient matmul_backward's, bit for
// bit, added to what dbias held; and within 1e-5 of fp64 sums. Shapes: fewer rows than one
// 64-row chunk, several chunks and a part one, and enough values for threads.
TEST(KernelBf16, OutputGradientRoundingSumsTheBiasGradient) {
  for (const auto& [N, OC] : {std::pair{5, 24}, std::pair{200, 40}, std::pair{300, 264}}) {
    SCOPED_TRACE(::testing::Message() << N << " x " << OC);
    std::vector<float> dout = to_f(random_vector(size_t(N) * OC, 41));
    dout[7] = std::bit_cast<float>(0x3f808000u);  // a tie
    const std::vector<float> start = to_f(random_vector(OC, 42));
    std::vector<double> exact(OC);
    for (int o = 0; o < OC; ++o) {
      exact[o] = start[o];
      for (int i = 0; i < N; ++i) exact[o] += dout[size_t(i) * OC + o];
    }
    on_every_isa([&] {
      std::vector<bf16> got(dout.size());
      std::vector<float> dbias = start, want_dbias = start;
      k::f32_to_bf16_bias_grad(got.data(), dbias.data(), dout.data(), N, OC);
      k::matmul_backward(nullptr, nullptr, want_dbias.data(), dout.data(), nullptr, nullptr, N, 0, OC, false);
      EXPECT_TRUE(got == rounded(dout));
      EXPECT_EQ(dbias, want_dbias);
      EXPECT_LT(max_rel_error(to_d(dbias), exact), 1e-5);
    }, /*with_reference=*/true);
  }
}

TEST(KernelBf16, MatmulMatchesTheReferenceAndFp32) {
  for (const auto [N, C, OC] : {std::array{5, 16, 12}, std::array{130, 40, 24}, std::array{64, 96, 200}}) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C << " OC " << OC);
    const auto x = to_f(random_vector(N * C, 5)), w = to_f(random_vector(OC * C, 6)),
               b = to_f(random_vector(OC, 7)), dy = to_f(random_vector(N * OC, 8));
    const auto xb = rounded(x), wb = rounded(w), dyb = rounded(dy);
    on_every_isa([&] {
      for (bool with_bias : {false, true}) {
        std::vector<float> got(N * OC), expected(N * OC), fp32(N * OC);
        const float* bias = with_bias ? b.data() : nullptr;
        k::matmul_bf16_forward(got.data(), xb.data(), wb.data(), bias, N, C, OC);
        ref::matmul_bf16_forward(expected.data(), xb.data(), wb.data(), bias, N, C, OC);
        ref::matmul_forward(fp32.data(), x.data(), w.data(), bias, N, C, OC);
        EXPECT_LT(max_rel_error(to_d(got), to_d(expected)), 1e-5);
        EXPECT_LT(max_error_rel_to_max(got.data(), fp32.data(), got.size()), 1e-2);
      }
      for (bool accumulate : {false, true}) {
        std::vector<float> dx(N * C, 1.0f), dw(OC * C, 0.5f), dx_ref = dx, dw_ref = dw;
        k::matmul_bf16_backward(dx.data(), dw.data(), dyb.data(), xb.data(), wb.data(), N, C, OC, accumulate);
        ref::matmul_bf16_backward(dx_ref.data(), dw_ref.data(), dyb.data(), xb.data(), wb.data(), N, C, OC,
                                  accumulate);
        EXPECT_LT(max_rel_error(to_d(dx), to_d(dx_ref)), 1e-5);
        EXPECT_LT(max_rel_error(to_d(dw), to_d(dw_ref)), 1e-5);
      }
      // Null gradients are skipped.
      std::vector<float> dw(OC * C, 0.0f), dw_ref(OC * C, 0.0f);
      k::matmul_bf16_backward(nullptr, dw.data(), dyb.data(), xb.data(), wb.data(), N, C, OC, false);
      ref::matmul_bf16_backward(nullptr, dw_ref.data(), dyb.data(), xb.data(), wb.data(), N, C, OC, false);
      EXPECT_LT(max_rel_error(to_d(dw), to_d(dw_ref)), 1e-5);
    });
  }
}

// The path is named, and the AVX2 path (an AVX2-only CPU, or FRUGAL_ISA=avx2) never claims
// native bf16 compute.
TEST(KernelBf16, MatmulPathIsNamed) {
  const std::string path = k::bf16_matmul_path();
  EXPECT_FALSE(path.empty());
  if (k::max_isa() == k::Isa::Avx2) {
    EXPECT_FALSE(k::bf16_matmul_native());
    EXPECT_EQ(path, "converted to fp32");
  }
}
