// The SIMD math of kernels/cpu/simd_math.h: the AVX2 exp against std::exp (on every CPU the build
// runs on), the AVX-512 exp against the AVX2 one (where the CPU has AVX-512).
#include "frugal/kernels/cpu/simd_math.h"  // first: see its note on <immintrin.h>
#include "frugal/kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace k = frugal::kernels;

namespace {

// exp of 16 floats with the AVX-512 twin (the caller checks the CPU).
__attribute__((target("avx512f"))) void exp512_of(const float* x, float* y) {
  _mm512_storeu_ps(y, k::cpu::exp512(_mm512_loadu_ps(x)));
}

}  // namespace

// The AVX2 exp (the softmax of every attention kernel, and the AVX-512 one's twin) is within 1e-6
// relative of std::exp wherever the result is a normal float far from the clamps (|x| < 80).
TEST(SimdMath, Exp256WithinOneMillionthOfStdExp) {
  std::vector<float> x;
  for (float v = -80.0f; v < 80.0f; v += 0.0371f) x.push_back(v);
  x.resize((x.size() + 7) / 8 * 8, 0.0f);
  std::vector<float> got(x.size());
  for (size_t i = 0; i < x.size(); i += 8)
    _mm256_storeu_ps(got.data() + i, k::cpu::exp256(_mm256_loadu_ps(x.data() + i)));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i] / std::exp(double(x[i])), 1.0, 1e-6) << "x = " << x[i];
}

// The AVX-512 exp gives the same bits as the AVX2 one on every lane, over the whole clamped range
// and beyond it (the attention kernels' softmax uses either).
TEST(SimdMath, Exp512SameBitsAsExp256) {
  if (!frugal::kernels::isa_available(frugal::kernels::Isa::Avx512)) GTEST_SKIP() << "AVX-512 is not available (CPU or FRUGAL_ISA)";
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0371f) x.push_back(v);
  x.resize((x.size() + 15) / 16 * 16, 88.5f);
  std::vector<float> want(x.size()), got(x.size());
  for (size_t i = 0; i < x.size(); i += 8)
    _mm256_storeu_ps(want.data() + i, k::cpu::exp256(_mm256_loadu_ps(x.data() + i)));
  for (size_t i = 0; i < x.size(); i += 16) exp512_of(x.data() + i, got.data() + i);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0) << "x = " << x[i];
}
