// Tests of self-attention under AttentionPatterns: the pattern's bulk answers (key/query bit rows,
// tile kinds, pair counts) against brute force over allows(), the fp64 reference against finite
// differences (causal and sparse patterns), the optimised CPU kernels (float; AVX2 and, where the
// CPU has it, AVX-512) against the reference (fp64) on many shapes and every pattern kind,
// thread-count determinism, Strided's decomposition (window + residue classes) at its edges, decode
// against the forward's last row, that tiles a pattern leaves empty are never computed, and the
// forward and backward on bf16 operands against the references of their own arithmetic and of fp32.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/cpu/attention.h"
#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/attention_ref.h"
#include "gradcheck.h"
#include "optimised_kernels.h"

const auto* const optimised_kernels = frugal::testing::register_optimised_kernels();

namespace {

using frugal::kernels::Isa;
using frugal::kernels::AttentionPattern;
using frugal::kernels::isa_name;
using frugal::kernels::attention_set_isa;
using frugal::testing::max_rel_error;
using frugal::testing::numeric_gradient;
using frugal::testing::random_vector;

struct Shape {
  int B, T, C, NH;
};

std::vector<float> to_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }
std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Results of one forward + backward pass (backward fed with dout).
template <class F>
struct Pass {
  std::vector<F> out, lse, dqkv;
};

template <class F>
Pass<F> run_reference(const std::vector<F>& qkv, const std::vector<F>& dout, const Shape& s,
                      const AttentionPattern& pattern = {}) {
  Pass<F> r{std::vector<F>(size_t(s.B) * s.T * s.C), std::vector<F>(size_t(s.B) * s.NH * s.T),
            std::vector<F>(qkv.size())};
  frugal::kernels::ref::attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C,
                                          s.NH, pattern);
  frugal::kernels::ref::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                                           r.lse.data(), s.B, s.T, s.C, s.NH, pattern);
  return r;
}

Pass<float> run_optimised(const std::vector<float>& qkv, const std::vector<float>& dout,
                          const Shape& s, const AttentionPattern& pattern = {}) {
  // NaN-filled outputs: every element must be written (dqkv is overwrite, not accumulate).
  Pass<float> r{std::vector<float>(size_t(s.B) * s.T * s.C, NAN),
                std::vector<float>(size_t(s.B) * s.NH * s.T, NAN),
                std::vector<float>(qkv.size(), NAN)};
  frugal::kernels::attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                                     pattern);
  frugal::kernels::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                                      r.lse.data(), s.B, s.T, s.C, s.NH, pattern);
  return r;
}

// Every kind (an encoder's Bidirectional too), with parameters that give the 64-wide kernel tiles empty, full and partial kinds,
// windows inside one tile and across tiles, blocks aligned to tiles and not, no summary columns.
std::vector<AttentionPattern> patterns() {
  return {AttentionPattern::causal(),       AttentionPattern::local(16),
          AttentionPattern::local(1),       AttentionPattern::local(70),
          AttentionPattern::strided(16, 16), AttentionPattern::strided(3, 7),
          AttentionPattern::fixed(16, 2),   AttentionPattern::fixed(64, 1),
          AttentionPattern::fixed(50, 0),   AttentionPattern::fixed(5, 5),
          AttentionPattern::bidirectional()};
}

// ---- AttentionPattern against brute force over allows() ----

TEST(AttentionPattern, BitRowsMatchAllows) {
  for (const AttentionPattern& p : patterns()) {
    SCOPED_TRACE(p.name());
    for (int i = 0; i < 200; i += 3)
      for (int p0 : {0, 1, 5, 37, 64, 100, 150})
        for (int n : {1, 7, 33, 64}) {
          uint64_t keys = 0, queries = 0;
          for (int c = 0; c < n; ++c) {
            keys |= uint64_t{p.allows(i, p0 + c)} << c;
            queries |= uint64_t{p.allows(p0 + c, i)} << c;
          }
          ASSERT_EQ(p.keys_of(i, p0, n), keys) << "query " << i << " keys " << p0 << "+" << n;
          ASSERT_EQ(p.queries_of(i, p0, n), queries)
              << "key " << i << " queries " << p0 << "+" << n;
        }
  }
}

TEST(AttentionPattern, TileKindsMatchAllows) {
  for (const AttentionPattern& p : patterns()) {
    SCOPED_TRACE(p.name());
    for (int q0 = 0; q0 < 150; q0 += 7)
      for (int k0 = 0; k0 < 150; k0 += 5)
        for (int nq : {1, 6, 64})
          for (int nk : {1, 9, 64}) {
            int allowed = 0;
            for (int i = q0; i < q0 + nq; ++i)
              for (int j = k0; j < k0 + nk; ++j) allowed += p.allows(i, j);
            const auto want = allowed == 0             ? AttentionPattern::Tile::Empty
                              : allowed == nq * nk ? AttentionPattern::Tile::Full
                                                   : AttentionPattern::Tile::Partial;
            ASSERT_EQ(p.tile(q0, q0 + nq, k0, k0 + nk), want)
                << "queries " << q0 << "+" << nq << " keys " << k0 << "+" << nk;
          }
  }
}

TEST(AttentionPattern, PairsCountAllowedPairsAndTheDiagonalIsAlwaysAllowed) {
  for (const AttentionPattern& p : patterns())
    for (int T : {1, 2, 15, 16, 17, 64, 128, 200}) {
      int64_t n = 0, farthest = 0;
      for (int i = 0; i < T; ++i) {
        ASSERT_TRUE(p.allows(i, i)) << p.name();
        ASSERT_EQ(p.allows(i, i + 1), !p.is_causal()) << p.name();
        for (int j = 0; j < T; ++j) {
          if (!p.allows(i, j)) continue;
          ++n;
          farthest = std::max<int64_t>(farthest, i - j);
        }
      }
      EXPECT_EQ(p.pairs(T), n) << p.name() << " T=" << T;
      EXPECT_LE(farthest, p.max_distance()) << p.name() << " T=" << T;
      if (p.max_distance() < T) {  // a bound, and the tightest once T is long enough
        EXPECT_EQ(farthest, p.max_distance()) << p.name() << " T=" << T;
      }
    }
  EXPECT_EQ(AttentionPattern::causal().pairs(128), 128 * 129 / 2);
  EXPECT_EQ(AttentionPattern::local(16).pairs(128), 136 + 112 * 16);  // 1+..+16, then 16 each
  EXPECT_EQ(AttentionPattern::bidirectional().pairs(128), 128 * 128);
}

TEST(AttentionPattern, RejectsInvalidParametersAndNamesItself) {
  EXPECT_THROW(AttentionPattern::local(0), frugal::Error);
  EXPECT_THROW(AttentionPattern::strided(16, 0), frugal::Error);
  EXPECT_THROW(AttentionPattern::strided(0, 16), frugal::Error);
  EXPECT_THROW(AttentionPattern::fixed(0, 0), frugal::Error);
  EXPECT_THROW(AttentionPattern::fixed(16, 17), frugal::Error);
  EXPECT_THROW(AttentionPattern::fixed(16, -1), frugal::Error);
  EXPECT_EQ(AttentionPattern().name(), "causal");
  EXPECT_EQ(AttentionPattern::bidirectional().name(), "bidirectional");
  EXPECT_EQ(AttentionPattern::strided(16, 8).name(), "strided(w=16,s=8)");
  EXPECT_EQ(AttentionPattern::fixed(16, 2), AttentionPattern::fixed(16, 2));
  EXPECT_NE(AttentionPattern::local(16), AttentionPattern::local(8));
}

// Runs check() once per optimised instruction set, then restores the family's previous choice.
template <class F>
void for_each_isa(F&& check) {
  const Isa before = frugal::kernels::attention_active_isa();
  for (Isa isa : frugal::kernels::available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    EXPECT_EQ(attention_set_isa(isa), isa);
    check();
  }
  attention_set_isa(before);
}

// Random qkv in [-2, 2): scores q·k/sqrt(HS) then have std ~1.3, so softmax rows are far from
// uniform and the online rescaling is exercised.
std::vector<double> random_qkv(const Shape& s, unsigned seed) {
  return random_vector(size_t(s.B) * s.T * 3 * s.C, seed, 2.0);
}

TEST(AttentionReference, GradientMatchesFiniteDifferences) {
  const Shape s{2, 9, 16, 2};  // HS = 8
  for (const AttentionPattern& pattern :
       {AttentionPattern::causal(), AttentionPattern::local(3), AttentionPattern::strided(2, 3),
        AttentionPattern::fixed(3, 1), AttentionPattern::bidirectional()}) {
    SCOPED_TRACE(pattern.name());
    std::vector<double> qkv = random_qkv(s, 1);
    const std::vector<double> R = random_vector(size_t(s.B) * s.T * s.C, 2);
    std::vector<double> out(R.size()), lse(size_t(s.B) * s.NH * s.T);
    auto loss = [&] {
      frugal::kernels::ref::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C,
                                              s.NH, pattern);
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += out[i] * R[i];
      return sum;
    };
    const std::vector<double> numeric = numeric_gradient(qkv, loss);
    const Pass<double> analytic = run_reference(qkv, R, s, pattern);
    EXPECT_LT(max_rel_error(analytic.dqkv, numeric), 1e-7);
  }
}

// A sparse pattern changes the result (the pattern reaches the reference at all).
TEST(AttentionReference, SparsePatternDiffersFromCausal) {
  const Shape s{1, 20, 16, 2};
  const std::vector<double> qkv = random_qkv(s, 4), dout = random_vector(size_t(s.T) * s.C, 5);
  const Pass<double> causal = run_reference(qkv, dout, s);
  const Pass<double> local = run_reference(qkv, dout, s, AttentionPattern::local(4));
  for (int c = 0; c < 4 * s.C; ++c) EXPECT_EQ(causal.out[c], local.out[c]);  // rows 0-3: same keys
  EXPECT_GT(max_rel_error(causal.out, local.out), 1e-3);
}

// Bidirectional attention sees later keys: its last row is causal attention's (every key), the
// others differ.
TEST(AttentionReference, BidirectionalSeesLaterKeys) {
  const Shape s{1, 20, 16, 2};
  const std::vector<double> qkv = random_qkv(s, 4), dout = random_vector(size_t(s.T) * s.C, 5);
  const Pass<double> causal = run_reference(qkv, dout, s);
  const Pass<double> full = run_reference(qkv, dout, s, AttentionPattern::bidirectional());
  const size_t last = size_t(s.T - 1) * s.C;
  for (int c = 0; c < s.C; ++c) EXPECT_NEAR(causal.out[last + c], full.out[last + c], 1e-15);
  for (int c = 0; c < s.C; ++c) EXPECT_GT(std::abs(causal.out[c] - full.out[c]), 1e-6) << c;
}

TEST(AttentionReference, SingleTokenIsItsValue) {
  const Shape s{1, 1, 16, 2};
  const std::vector<double> qkv = random_qkv(s, 3);
  const Pass<double> r = run_reference(qkv, std::vector<double>(16, 1.0), s);
  for (int h = 0; h < s.NH; ++h) {
    double qk = 0;
    for (int c = 0; c < 8; ++c) qk += qkv[h * 8 + c] * qkv[16 + h * 8 + c];
    EXPECT_NEAR(r.lse[h], qk / std::sqrt(8.0), 1e-12);  // one score: lse is that score
  }
  for (int c = 0; c < s.C; ++c) EXPECT_DOUBLE_EQ(r.out[c], qkv[2 * s.C + c]);
}

// Tolerances, as max |a-b| / max(1,|a|,|b|) of float optimised vs fp64 reference. Observed on the
// shapes below: out <= 1.6e-6, lse <= 5e-7, dqkv <= 1.5e-6; the bounds leave ~7-10x headroom.
constexpr double kForwardTol = 1e-5;
constexpr double kBackwardTol = 2e-5;

class AttentionOptimised : public ::testing::TestWithParam<Shape> {};

void expect_matches_reference(const std::vector<double>& qkv, const Shape& s,
                              const AttentionPattern& pattern = {}) {
  SCOPED_TRACE(pattern.name());
  const std::vector<double> dout = random_vector(size_t(s.B) * s.T * s.C, 20 + s.T);
  const Pass<double> ref = run_reference(qkv, dout, s, pattern);
  for_each_isa([&] {
    const Pass<float> opt = run_optimised(to_float(qkv), to_float(dout), s, pattern);
    EXPECT_LT(max_rel_error(to_double(opt.out), ref.out), kForwardTol);
    EXPECT_LT(max_rel_error(to_double(opt.lse), ref.lse), kForwardTol);
    EXPECT_LT(max_rel_error(to_double(opt.dqkv), ref.dqkv), kBackwardTol);
  });
}

TEST_P(AttentionOptimised, MatchesReference) {
  const Shape s = GetParam();
  expect_matches_reference(random_qkv(s, 10 + s.T), s);
}

TEST_P(AttentionOptimised, MatchesReferenceForEveryPattern) {
  const Shape s = GetParam();
  for (const AttentionPattern& pattern : patterns())
    expect_matches_reference(random_qkv(s, 10 + s.T), s, pattern);
}

// ---- the forward on bf16 operands (attention_forward_bf16, train.precision = "bf16") ----

// qkv rounded to bf16 and widened back, as attention_forward_bf16 leaves it.
std::vector<float> rounded_bf16(const std::vector<float>& x) {
  std::vector<frugal::kernels::bf16> x16(x.size());
  std::vector<float> r(x.size());
  frugal::kernels::f32_to_bf16(x16.data(), x.data(), x.size());
  frugal::kernels::bf16_to_f32(r.data(), x16.data(), x.size());
  return r;
}

// One bf16 forward (NaN-filled outputs: every element must be written) and the bf16 backward after
// it, which reads the qkv the forward rounded.
struct Bf16Pass {
  std::vector<float> qkv, out, lse, dqkv;
  std::vector<frugal::kernels::bf16> out16;
};
Bf16Pass run_bf16(const std::vector<float>& qkv, const std::vector<float>& dout, const Shape& s,
                  const AttentionPattern& pattern) {
  const size_t n = size_t(s.B) * s.T * s.C;
  Bf16Pass r{qkv, std::vector<float>(n, NAN), std::vector<float>(size_t(s.B) * s.NH * s.T, NAN),
             std::vector<float>(qkv.size(), NAN), std::vector<frugal::kernels::bf16>(n)};
  frugal::kernels::attention_forward_bf16(r.out.data(), r.out16.data(), r.lse.data(), r.qkv.data(), s.B, s.T,
                                          s.C, s.NH, pattern);
  frugal::kernels::attention_backward_bf16(r.dqkv.data(), dout.data(), r.qkv.data(), r.out.data(), r.lse.data(),
                                           s.B, s.T, s.C, s.NH, pattern);
  return r;
}

// On every path (the reference's too), every pattern and sequences of one and two query tiles:
// where attention_bf16_operands, qkv is left rounded to bf16 bit for bit (the values the backward
// reads); elsewhere qkv is untouched and out and lse are attention_forward's bit for bit (its
// fallback); out16 is out's rounding bit for bit (Strided's rows are final only after its residue
// classes), and 1 and 2 threads give the same bits.
TEST(AttentionBf16, RoundsQkvInPlaceAndOut16IsTheRoundedOutput) {
  const int saved = omp_get_max_threads();
  for (const Shape& s : {Shape{2, 70, 64, 2}, Shape{2, 40, 64, 2}})
  for (const AttentionPattern& pattern : patterns()) {
    SCOPED_TRACE(fmt::format("T={} {}", s.T, pattern.name()));
    const std::vector<float> qkv = to_float(random_qkv(s, 5)), dout = to_float(random_vector(size_t(s.B) * s.T * s.C, 6));
    const bool bf16 = frugal::kernels::attention_bf16_operands(pattern, s.T);
    const std::vector<float> want_qkv = bf16 ? rounded_bf16(qkv) : qkv;
    const auto check = [&] {
      omp_set_num_threads(1);
      const Bf16Pass one = run_bf16(qkv, dout, s, pattern);
      omp_set_num_threads(2);
      const Bf16Pass two = run_bf16(qkv, dout, s, pattern);
      EXPECT_TRUE(one.qkv == want_qkv);
      if (!bf16) {
        const Pass<float> fp32 = run_optimised(qkv, dout, s, pattern);
        EXPECT_TRUE(one.out == fp32.out && one.lse == fp32.lse && one.dqkv == fp32.dqkv);
      }
      std::vector<frugal::kernels::bf16> want16(one.out.size());
      frugal::kernels::f32_to_bf16(want16.data(), one.out.data(), one.out.size());
      EXPECT_TRUE(one.out16 == want16);
      EXPECT_EQ(std::memcmp(one.out.data(), two.out.data(), one.out.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(one.lse.data(), two.lse.data(), one.lse.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(one.dqkv.data(), two.dqkv.data(), one.dqkv.size() * sizeof(float)), 0);
    };
    for_each_isa(check);
    const Isa before = frugal::kernels::attention_active_isa();
    attention_set_isa(Isa::Ref);
    {
      SCOPED_TRACE("ref");
      check();
    }
    attention_set_isa(before);
  }
  omp_set_num_threads(saved);
}

// Tolerances of the bf16 forward and the bf16 backward after it, max |a-b| / max(1,|a|,|b|);
// observed maxima over the shapes and patterns below in brackets:
// - against the fp64 reference of the same arithmetic (ref::attention_forward_bf16: the same
//   rounded q, k, v, each P rounded to bf16 where it weights V): lse the fp32 kernels' kForwardTol
//   [2.6e-7] (its scores are products of the same bf16 values; no rounded P enters it); out
//   differs by the rounding of P, which the kernel applies to exp(s - its running shift) rather
//   than exp(s - max): each weight within 2^-9 relative on either side, so out within
//   2 · 2^-9 · max|v| = 7.8e-3 for |v| <= 2 [4.2e-3]: kBf16OutTol; dqkv [5.4e-3]: kBf16GradTol
//   (most of it the forward's: D and dS read the out that differs);
// - the backward alone, against ref::attention_backward_bf16 on the kernel's own qkv, out and lse:
//   fp32 sums of the same bf16 products, and P or dS that round to the neighbouring bf16 where
//   fp32 and fp64 straddle a rounding boundary [4.8e-4]: kBf16BackwardTol. The fp32 backward on the
//   same inputs (dO, P and dS not rounded) is 1.5e-3 to 6.0e-3 from that reference: the bound tells
//   them apart;
// - against the fp64 reference on the unrounded qkv (what the fp32 kernel computes), q, k and v
//   rounded to 8 bits of mantissa: kBf16VsFp32Tol [out 1.2e-2, lse 1.1e-2, dqkv 8.8e-3].
constexpr double kBf16OutTol = 8e-3, kBf16GradTol = 1.5e-2, kBf16BackwardTol = 1e-3, kBf16VsFp32Tol = 3e-2;

// Where attention_bf16_operands says no, the reference of the same arithmetic is fp32's, and the
// fp32 kernels' tolerances hold.
void expect_bf16_matches_references(const Shape& s, const AttentionPattern& pattern, unsigned seed) {
  SCOPED_TRACE(pattern.name());
  const bool bf16 = frugal::kernels::attention_bf16_operands(pattern, s.T);
  const std::vector<float> qkv = to_float(random_qkv(s, seed));
  const std::vector<double> dout = random_vector(size_t(s.B) * s.T * s.C, seed + 1);
  Pass<double> same{std::vector<double>(dout.size()), std::vector<double>(size_t(s.B) * s.NH * s.T),
                    std::vector<double>(qkv.size())};
  std::vector<double> qkv16 = to_double(qkv);
  if (bf16)
    frugal::kernels::ref::attention_forward_bf16(same.out.data(), same.lse.data(), qkv16.data(), s.B, s.T, s.C,
                                                 s.NH, pattern);
  else
    frugal::kernels::ref::attention_forward(same.out.data(), same.lse.data(), qkv16.data(), s.B, s.T, s.C, s.NH,
                                            pattern);
  (bf16 ? frugal::kernels::ref::attention_backward_bf16<double> : frugal::kernels::ref::attention_backward<double>)(
      same.dqkv.data(), dout.data(), qkv16.data(), same.out.data(), same.lse.data(), s.B, s.T, s.C, s.NH, pattern);
  const Pass<double> fp32 = run_reference(to_double(qkv), dout, s, pattern);
  for_each_isa([&] {
    const Bf16Pass got = run_bf16(qkv, to_float(dout), s, pattern);
    EXPECT_LT(max_rel_error(to_double(got.lse), same.lse), kForwardTol);
    EXPECT_LT(max_rel_error(to_double(got.out), same.out), bf16 ? kBf16OutTol : kForwardTol);
    EXPECT_LT(max_rel_error(to_double(got.dqkv), same.dqkv), bf16 ? kBf16GradTol : kBackwardTol);
    // the backward alone: the reference of its arithmetic on the kernel's own forward
    std::vector<double> own(qkv.size());
    (bf16 ? frugal::kernels::ref::attention_backward_bf16<double> : frugal::kernels::ref::attention_backward<double>)(
        own.data(), dout.data(), to_double(got.qkv).data(), to_double(got.out).data(), to_double(got.lse).data(), s.B,
        s.T, s.C, s.NH, pattern);
    EXPECT_LT(max_rel_error(to_double(got.dqkv), own), bf16 ? kBf16BackwardTol : kBackwardTol);
    EXPECT_LT(max_rel_error(to_double(got.out), fp32.out), kBf16VsFp32Tol);
    EXPECT_LT(max_rel_error(to_double(got.lse), fp32.lse), kBf16VsFp32Tol);
    EXPECT_LT(max_rel_error(to_double(got.dqkv), fp32.dqkv), kBf16VsFp32Tol);
  });
}

TEST_P(AttentionOptimised, Bf16MatchesReferenceForEveryPattern) {
  const Shape s = GetParam();
  for (const AttentionPattern& pattern : patterns()) expect_bf16_matches_references(s, pattern, 60 + s.T);
}

// Scores that grow along the sequence (up to ~60): the forward's running softmax shift must move
// many times, rescaling partial outputs, and exp must not overflow.
TEST(AttentionOptimised, MatchesReferenceOnGrowingScores) {
  const Shape s{2, 150, 64, 2};  // HS = 32
  std::vector<double> qkv = random_vector(size_t(s.B) * s.T * 3 * s.C, 5);
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int c = 0; c < s.C; ++c) {
        double* row = qkv.data() + (size_t(b) * s.T + t) * 3 * s.C;
        row[c] = 1.0 + std::fabs(row[c]);                            // q > 0
        row[s.C + c] = std::fabs(row[s.C + c]) * (1.0 + t / 20.0);  // k grows with position
      }
  expect_matches_reference(qkv, s);
}

// out, lse and dqkv on 1 and 2 threads are the same bit for bit, per instruction set.
void expect_same_bits_on_one_and_two_threads(const Shape& s, const AttentionPattern& pattern = {}) {
  SCOPED_TRACE(pattern.name());
  const std::vector<float> qkv = to_float(random_qkv(s, 30));
  const std::vector<float> dout = to_float(random_vector(size_t(s.B) * s.T * s.C, 31));
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  const int saved = omp_get_max_threads();
  for_each_isa([&] {
    omp_set_num_threads(1);
    const Pass<float> one = run_optimised(qkv, dout, s, pattern);
    omp_set_num_threads(2);
    const Pass<float> two = run_optimised(qkv, dout, s, pattern);
    EXPECT_TRUE(same(one.out, two.out));
    EXPECT_TRUE(same(one.lse, two.lse));
    EXPECT_TRUE(same(one.dqkv, two.dqkv));
  });
  omp_set_num_threads(saved);
}

TEST_P(AttentionOptimised, SameBitsOnOneAndTwoThreads) {
  expect_same_bits_on_one_and_two_threads(GetParam());
}

// Strided{w, s} runs as its window Local(w) plus one causal pass per residue class mod s over the
// pairs beyond the window, merged through the lse. Its edges: windows narrower than, equal to and
// wider than the stride, and not multiples of it; s = 1 (every pair); classes of unequal length
// (T not a multiple of s), T not a multiple of the 64-wide tile, classes longer than a tile;
// sequences where some or all classes have no pair beyond the window (T <= w + s); B·NH > 1.
TEST(AttentionOptimised, StridedDecompositionMatchesReference) {
  const std::vector<std::pair<Shape, AttentionPattern>> cases = {
      {{2, 1024, 64, 2}, AttentionPattern::strided(16, 16)},
      {{2, 1024, 64, 2}, AttentionPattern::strided(8, 16)},
      {{2, 1024, 64, 2}, AttentionPattern::strided(32, 16)},
      {{2, 1024, 64, 2}, AttentionPattern::strided(16, 7)},
      {{2, 1024, 64, 2}, AttentionPattern::strided(3, 7)},
      {{1, 1000, 48, 3}, AttentionPattern::strided(16, 16)},  // 1000 = 62·16 + 8 = 15·64 + 40
      {{3, 201, 64, 2}, AttentionPattern::strided(16, 7)},
      {{1, 300, 64, 1}, AttentionPattern::strided(5, 2)},     // classes of 150 rows: 3 tiles
      {{2, 70, 64, 2}, AttentionPattern::strided(4, 1)},      // s = 1: Causal
      {{1, 40, 32, 1}, AttentionPattern::strided(30, 16)},    // only class r < 8 has a pair beyond
      {{2, 16, 32, 2}, AttentionPattern::strided(16, 16)},    // no pair beyond the window
      {{1, 9, 32, 1}, AttentionPattern::strided(2, 20)},      // s > T
  };
  for (const auto& [s, pattern] : cases) {
    SCOPED_TRACE(fmt::format("B{} T{} C{} NH{}", s.B, s.T, s.C, s.NH));
    expect_matches_reference(random_qkv(s, 50 + s.T), s, pattern);
    expect_same_bits_on_one_and_two_threads(s, pattern);
  }
}

// T=1; T below, at and above the 64-wide tile and not a multiple of it; HS 8/24/32/64/256 (24
// leaves an 8-wide column remainder); NH 1/3/4/6; B 1/2/3.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionOptimised,
                         ::testing::Values(Shape{1, 1, 8, 1}, Shape{3, 1, 128, 4},
                                           Shape{3, 64, 48, 6}, Shape{1, 130, 384, 6},
                                           Shape{3, 70, 128, 4}, Shape{2, 33, 72, 3},
                                           Shape{1, 200, 64, 1}, Shape{1, 67, 256, 1}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return fmt::format("B{}_T{}_C{}_NH{}", s.B, s.T, s.C, s.NH);
                         });

TEST(AttentionOptimised, RejectsUnsupportedHeadSize) {
  std::vector<float> qkv(3 * 12), out(12), lse(1);
  for_each_isa([&] {
    EXPECT_THROW(
        frugal::kernels::attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 12, 1, {}),
        frugal::Error);
  });
}

// Tiles a pattern leaves empty are skipped, not computed and masked: keys and values of the first
// key tile (positions 0-63) are NaN, and query tiles 2 and 3 (positions 128-255) see none of them.
// Any product with those rows (a masked score is 0, and 0·NaN = NaN) would make those queries'
// outputs, lse and dQ NaN; skipped, they equal the clean run's bit for bit. Fixed(128, 1) has no
// bound on how far back a query looks (its summary columns), so only the tile skip protects it;
// Local(16) is also trimmed to its band inside the kernels' products.
TEST(AttentionOptimised, EmptyTilesAreNeverComputed) {
  const Shape s{1, 256, 64, 2};
  const std::vector<float> qkv = to_float(random_qkv(s, 40));
  const std::vector<float> dout = to_float(random_vector(size_t(s.T) * s.C, 41));
  std::vector<float> poisoned = qkv;
  for (int t = 0; t < 64; ++t)
    std::fill_n(poisoned.begin() + size_t(t) * 3 * s.C + s.C, 2 * s.C,
                std::numeric_limits<float>::quiet_NaN());
  for (const AttentionPattern& pattern :
       {AttentionPattern::fixed(128, 1), AttentionPattern::local(16)}) {
    SCOPED_TRACE(pattern.name());
    for_each_isa([&] {
      const Pass<float> clean = run_optimised(qkv, dout, s, pattern);
      const Pass<float> dirty = run_optimised(poisoned, dout, s, pattern);
      for (int t = 128; t < s.T; ++t) {
        for (int c = 0; c < s.C; ++c) {
          ASSERT_EQ(dirty.out[size_t(t) * s.C + c], clean.out[size_t(t) * s.C + c]) << "row " << t;
          ASSERT_EQ(dirty.dqkv[size_t(t) * 3 * s.C + c], clean.dqkv[size_t(t) * 3 * s.C + c])
              << "dq row " << t;
        }
        for (int h = 0; h < s.NH; ++h)
          ASSERT_EQ(dirty.lse[size_t(h) * s.T + t], clean.lse[size_t(h) * s.T + t]) << "lse " << t;
      }
      EXPECT_TRUE(std::isnan(dirty.out[0])) << "the poison must reach the queries that see it";
    });
  }
}

// attention_decode at position t - 1 equals row t - 1 of the forward over t positions (the cache
// holds the keys and values of all t positions), for every t of `ts` (at most T) and pattern.
void expect_decode_equals_last_row(int T, const std::vector<int>& ts,
                                   const std::vector<AttentionPattern>& pats) {
  const int C = 64, NH = 4;
  const std::vector<float> qkv = to_float(random_vector(size_t(T) * 3 * C, 42, 2.0));
  std::vector<float> kc(size_t(T) * C), vc(size_t(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      kc[size_t(t) * C + c] = qkv[size_t(t) * 3 * C + C + c];
      vc[size_t(t) * C + c] = qkv[size_t(t) * 3 * C + 2 * C + c];
    }
  for (const AttentionPattern& pattern : pats)
    for (int t : ts) {
      SCOPED_TRACE(fmt::format("{} t={}", pattern.name(), t));
      std::vector<float> full(size_t(t) * C), lse(size_t(NH) * t), out(C);
      frugal::kernels::attention_forward(full.data(), lse.data(), qkv.data(), 1, t, C, NH,
                                         pattern);
      frugal::kernels::attention_decode(out.data(), qkv.data() + size_t(t - 1) * 3 * C, kc.data(),
                                        vc.data(), t, C, NH, pattern);
      for (int c = 0; c < C; ++c) ASSERT_NEAR(out[c], full[size_t(t - 1) * C + c], 1e-5) << c;
    }
}

TEST(AttentionDecode, EqualsLastRowOfTheForwardForEveryPattern) {
  expect_decode_equals_last_row(140, {1, 17, 64, 65, 130, 140}, patterns());
}

// The last row of Strided's forward merges its window with its residue class (or has no strided
// pair beyond the window); decode attends the same keys directly. Both instruction sets.
TEST(AttentionDecode, EqualsLastRowOfTheStridedForward) {
  for_each_isa([] {
    expect_decode_equals_last_row(
        1024, {1, 16, 17, 33, 1000, 1023, 1024},
        {AttentionPattern::strided(16, 16), AttentionPattern::strided(8, 16),
         AttentionPattern::strided(32, 16), AttentionPattern::strided(16, 7),
         AttentionPattern::strided(3, 7)});
  });
}

TEST(AttentionOptimised, AutoPicksTheProcessChoiceAndAvx512OnlyWhereAvailable) {
  const Isa before = frugal::kernels::attention_active_isa();
  const Isa want = frugal::kernels::selected_isa();
  EXPECT_EQ(attention_set_isa(Isa::Auto), want);
  EXPECT_EQ(frugal::kernels::attention_active_isa(), want);
  if (frugal::kernels::max_isa() == Isa::Avx2) {
    EXPECT_THROW(attention_set_isa(Isa::Avx512), frugal::Error);
  }
  attention_set_isa(before);
}

}  // namespace
