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
