// The lm_head kernel family (fused LM head + softmax cross-entropy): the CPU kernel against the
// fp64 reference, the reference backward against fp64 finite differences; the vocabulary-split
// version over two ranks (threads) against the whole vocabulary's; the output bias (fp32 and bf16
// heads, finite differences of its gradient); the bf16 head against its
// reference (1e-5 on the loss, 1e-4 on the gradients: besides the order of the sums, a gradient
// entry within a float's rounding of a bf16 tie may round the other way) and against the fp32
// head (1e-2: the operands' rounding), whole and split.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <thread>
#include <vector>

#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/kernels/ref/lm_head_ref.h"
#include "kernel_test.h"

namespace {

// The optimised LM head + cross-entropy against the fp64 reference (a float reference's own
// summation error over a large vocabulary is larger than the kernel's) on weights of Vp rows (V
// real): losses, input gradient, and the weight gradient accumulated onto 0.5, whose vocabulary
// padding rows [V, Vp) the kernel must leave untouched.
void expect_lm_head_matches_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<int32_t>& tgt, int N, int C, int V, int Vp,
                                      float softcap = 0) {
  std::vector<float> l1(N), dx1(size_t(N) * C), dw1(size_t(Vp) * C, 0.5f);
  k::lm_head_cross_entropy(l1.data(), dx1.data(), dw1.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.5f,
                           softcap);
  std::vector<double> l2(N), dx2(dx1.size()), dw2(dw1.size(), 0.0);
  ref::lm_head_cross_entropy(l2.data(), dx2.data(), dw2.data(), to_d(x).data(), to_d(w).data(), tgt.data(), N, C,
                             V, 0.5, double(softcap));
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

// With an output bias (the masked-LM head's): the reference's bias gradient against fp64 finite
// differences, and the CPU kernel (fp32 and bf16, over several chunks) against the reference:
// losses, input gradient and the bias gradient accumulated onto 0.25; logits add the bias.
TEST(Kernels, LmHeadCrossEntropyWithOutputBias) {
  const int N = 6, C = 16, V = 11, Vp = 64;
  auto x = random_vector(N * C, 15), w = random_vector(Vp * C, 16), b = random_vector(V, 17);
  std::vector<int32_t> tgt = {3, 0, 10, -1, 7, 7};
  std::vector<double> losses(N);
  for (double cap : {0.0, 1.5}) {  // and with a logit soft-cap after the bias
    SCOPED_TRACE(cap);
    auto loss = [&] {
      ref::lm_head_cross_entropy<double>(losses.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V,
                                         0.0, cap, {}, b.data());
      double s = 0;
      for (double l : losses) s += l;
      return s;
    };
    std::vector<double> dx(N * C), dw(Vp * C, 0.0), db(V, 0.0);
    ref::lm_head_cross_entropy(losses.data(), dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V, 1.0, cap,
                               {}, b.data(), db.data());
    EXPECT_LT(max_rel_error(db, numeric_gradient(b, loss)), 1e-6);
    EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  }

  // Several chunks (V = 65537: 127 rows each), fp32 and bf16 heads against their references.
  const int N2 = 257, C2 = 8, V2 = 65537, Vp2 = 65600;
  const auto x2 = to_f(random_vector(size_t(N2) * C2, 22, 2.0)), w2 = to_f(random_vector(size_t(Vp2) * C2, 23));
  const auto b2 = to_f(random_vector(V2, 24, 3.0));
  std::vector<int32_t> tgt2(N2);
  for (int i = 0; i < N2; ++i) tgt2[i] = i % 17 == 5 ? -1 : static_cast<int32_t>((i * 7919) % V2);
  std::vector<k::bf16> w2b(w2.size());
  k::f32_to_bf16(w2b.data(), w2.data(), w2.size());
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    std::vector<float> l1(N2), dx1(size_t(N2) * C2), db1(V2, 0.25f), l2(N2), dx2(dx1.size()), db2(V2, 0.25f);
    if (bf16) {
      k::lm_head_cross_entropy_bf16(l1.data(), dx1.data(), nullptr, x2.data(), w2b.data(), tgt2.data(), N2, C2, V2,
                                    0.5f, 0.0f, {b2.data(), db1.data()});
      ref::lm_head_cross_entropy_bf16(l2.data(), dx2.data(), nullptr, x2.data(), w2b.data(), tgt2.data(), N2, C2, V2,
                                      0.5f, 0.0f, {b2.data(), db2.data()});
    } else {
      k::lm_head_cross_entropy(l1.data(), dx1.data(), nullptr, x2.data(), w2.data(), tgt2.data(), N2, C2, V2, 0.5f,
                               0.0f, {b2.data(), db1.data()});
      std::vector<double> l(N2), dxd(dx1.size()), dbd(V2, 0.25);
      ref::lm_head_cross_entropy(l.data(), dxd.data(), static_cast<double*>(nullptr), to_d(x2).data(),
                                 to_d(w2).data(), tgt2.data(), N2, C2, V2, 0.5, 0.0, {}, to_d(b2).data(), dbd.data());
      l2 = to_f(l), dx2 = to_f(dxd), db2 = to_f(dbd);
    }
    EXPECT_LT(max_error_rel_to_max(l1.data(), l2.data(), l2.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(dx1.data(), dx2.data(), dx2.size()), 1e-4);
    for (float& g : db1) g -= 0.25f;
    for (float& g : db2) g -= 0.25f;
    EXPECT_LT(max_error_rel_to_max(db1.data(), db2.data(), db2.size()), 1e-4);
  }
  std::vector<float> with(size_t(2) * V2), without(with.size());
  k::lm_head_logits(with.data(), x2.data(), w2.data(), 2, C2, V2, b2.data());
  k::lm_head_logits(without.data(), x2.data(), w2.data(), 2, C2, V2);
  for (size_t i = 0; i < with.size(); ++i) ASSERT_NEAR(with[i], without[i] + b2[i % V2], 1e-5) << i;
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

namespace {

// The vocabulary of Vp rows split over two ranks (threads meeting at a barrier, reducing in rank
// order) with `split_kernel`: every rank's losses equal, the input-gradient parts summed, and the
// weight-gradient rows of each rank, against the whole vocabulary's kernel.
using WholeKernel = decltype(&k::lm_head_cross_entropy);
using SplitKernel = decltype(&k::lm_head_cross_entropy_split);
void expect_split_matches_whole(WholeKernel whole_kernel, SplitKernel split_kernel, int N, int C, int V, int Vp,
                                float softcap = 0) {
  const auto x = to_f(random_vector(size_t(N) * C, 31, 2.0)), w = to_f(random_vector(size_t(Vp) * C, 32));
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i % 5 == 2 ? -1 : static_cast<int32_t>((i * 7919) % V);
  std::vector<float> losses(N), dx(size_t(N) * C), dw(size_t(Vp) * C, 0.0f);
  whole_kernel(losses.data(), dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V, 0.5f, softcap, {});

  constexpr int kRanks = 2;
  const int rows = Vp / kRanks;
  std::barrier<> sync(kRanks);
  std::vector<float*> inputs(kRanks);
  // x (n) = the ranks' elementwise combination, in rank order, on every rank
  const auto reduce = [&](int rank, float* x, size_t n, bool max) {
    inputs[rank] = x;
    sync.arrive_and_wait();
    std::vector<float> out(inputs[0], inputs[0] + n);
    for (int r = 1; r < kRanks; ++r)
      for (size_t i = 0; i < n; ++i) out[i] = max ? std::max(out[i], inputs[r][i]) : out[i] + inputs[r][i];
    sync.arrive_and_wait();
    std::copy(out.begin(), out.end(), x);
  };
  std::vector<std::vector<float>> rank_losses(kRanks, std::vector<float>(N)),
      rank_dx(kRanks, std::vector<float>(size_t(N) * C)), rank_dw(kRanks, std::vector<float>(size_t(rows) * C, 0.0f));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      const k::VocabSplit split{r * rows, V, [&, r](float* p, size_t n) { reduce(r, p, n, true); },
                                [&, r](float* p, size_t n) { reduce(r, p, n, false); }};
      const int local_v = std::clamp(V - r * rows, 0, rows);  // real columns on this rank
      split_kernel(rank_losses[r].data(), rank_dx[r].data(), rank_dw[r].data(), x.data(),
                   w.data() + size_t(r) * rows * C, tgt.data(), N, C, local_v, 0.5f, split, softcap);
    });
  for (std::thread& t : threads) t.join();
  std::vector<float> dx_sum(dx.size(), 0.0f), dw_all;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(rank_losses[r], rank_losses[0]) << "rank " << r;
    for (size_t i = 0; i < dx.size(); ++i) dx_sum[i] += rank_dx[r][i];
    dw_all.insert(dw_all.end(), rank_dw[r].begin(), rank_dw[r].end());
  }
  EXPECT_LT(max_error_rel_to_max(rank_losses[0].data(), losses.data(), losses.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(dx_sum.data(), dx.data(), dx.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(dw_all.data(), dw.data(), dw.size()), 1e-5);
}

void ref_split(float* losses, float* dinp, float* dweight, const float* inp, const float* weight,
               const int32_t* targets, int N, int C, int V, float dloss, const k::VocabSplit& split, float softcap) {
  ref::lm_head_cross_entropy_split<float>(losses, dinp, dweight, inp, weight, targets, N, C, V, dloss, split,
                                          softcap);
}

// The bf16 heads, on the first V rows of an fp32 weight rounded to bf16 first (so that they take the
// fp32 kernels' arguments).
std::vector<k::bf16> rounded(const float* w, size_t n) {
  std::vector<k::bf16> out(n);
  k::f32_to_bf16(out.data(), w, n);
  return out;
}
void whole_bf16(float* losses, float* dinp, float* dweight, const float* inp, const float* weight,
                const int32_t* targets, int N, int C, int V, float dloss, float softcap, const k::LmHeadBias&) {
  k::lm_head_cross_entropy_bf16(losses, dinp, dweight, inp, rounded(weight, size_t(V) * C).data(), targets, N, C,
                                V, dloss, softcap);
}
void split_bf16(float* losses, float* dinp, float* dweight, const float* inp, const float* weight,
                const int32_t* targets, int N, int C, int V, float dloss, const k::VocabSplit& split,
                float softcap) {
  k::lm_head_cross_entropy_split_bf16(losses, dinp, dweight, inp, rounded(weight, size_t(V) * C).data(), targets,
                                      N, C, V, dloss, split, softcap);
}
void ref_split_bf16(float* losses, float* dinp, float* dweight, const float* inp, const float* weight,
                    const int32_t* targets, int N, int C, int V, float dloss, const k::VocabSplit& split,
                    float softcap) {
  ref::lm_head_cross_entropy_split_bf16(losses, dinp, dweight, inp, rounded(weight, size_t(V) * C).data(),
                                        targets, N, C, V, dloss, split, softcap);
}

// The bf16 head against its reference and the fp32 head; weight gradients accumulate onto 0.5
// and leave the padding rows alone.
void expect_bf16_head_matches(int N, int C, int V, int Vp, float softcap = 0, double fp32_tolerance = 1e-2) {
  const auto x = to_f(random_vector(size_t(N) * C, 41, 2.0)), w = to_f(random_vector(size_t(Vp) * C, 42));
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 7919) % V);
  const auto wb = rounded(w.data(), w.size());
  struct Out {
    std::vector<float> losses, dx, dw;
  };
  const auto run = [&](auto kernel, const auto* weight) {
    Out o{std::vector<float>(N), std::vector<float>(size_t(N) * C), std::vector<float>(size_t(Vp) * C, 0.5f)};
    kernel(o.losses.data(), o.dx.data(), o.dw.data(), x.data(), weight, tgt.data(), N, C, V, 0.5f, softcap, {});
    for (size_t i = size_t(V) * C; i < o.dw.size(); ++i) EXPECT_EQ(o.dw[i], 0.5f) << "padding row " << i / C;
    for (float& g : o.dw) g -= 0.5f;
    return o;
  };
  const Out bf = run(k::lm_head_cross_entropy_bf16, wb.data());
  const Out reference = run(ref::lm_head_cross_entropy_bf16, wb.data());
  const Out fp32 = run(k::lm_head_cross_entropy, w.data());
  EXPECT_LT(max_error_rel_to_max(bf.losses.data(), reference.losses.data(), N), 1e-5);
  EXPECT_LT(max_error_rel_to_max(bf.dx.data(), reference.dx.data(), bf.dx.size()), 1e-4);
  EXPECT_LT(max_error_rel_to_max(bf.dw.data(), reference.dw.data(), bf.dw.size()), 1e-4);
  EXPECT_LT(max_error_rel_to_max(bf.losses.data(), fp32.losses.data(), N), fp32_tolerance);
  EXPECT_LT(max_error_rel_to_max(bf.dx.data(), fp32.dx.data(), bf.dx.size()), fp32_tolerance);
  EXPECT_LT(max_error_rel_to_max(bf.dw.data(), fp32.dw.data(), bf.dw.size()), fp32_tolerance);
  EXPECT_GT(max_error_rel_to_max(bf.dx.data(), fp32.dx.data(), bf.dx.size()), 0.0) << "the operands were not rounded";
}

}  // namespace

// Two ranks, one holding most of the vocabulary and the other a few real columns and padding;
// then over several chunks (V = 65537: chunks of 127 rows); the reference's own split version; and
// the bf16 head's, optimised and reference.
TEST(Kernels, LmHeadCrossEntropySplitOverTheVocabularyEqualsTheWhole) {
  expect_split_matches_whole(&k::lm_head_cross_entropy, &k::lm_head_cross_entropy_split, 6, 16, 70, 128);
  expect_split_matches_whole(&k::lm_head_cross_entropy, &k::lm_head_cross_entropy_split, 257, 8, 65537, 65600);
  expect_split_matches_whole(&k::lm_head_cross_entropy, &ref_split, 6, 16, 70, 128);
  expect_split_matches_whole(&whole_bf16, &split_bf16, 6, 16, 70, 128);
  expect_split_matches_whole(&whole_bf16, &split_bf16, 257, 8, 65537, 65600);
  expect_split_matches_whole(&whole_bf16, &ref_split_bf16, 6, 16, 70, 128);
}

// One chunk, and several (V = 65537: chunks of 127 rows).
TEST(Kernels, LmHeadCrossEntropyBf16MatchesItsReferenceAndTheFp32Head) {
  expect_bf16_head_matches(6, 16, 70, 128);
  expect_bf16_head_matches(257, 8, 65537, 65600);
}

// model.logit_softcap: the reference's backward through the cap against fp64 finite differences
// (with logits large enough that the cap bends them: |z| up to ~2.7 against a cap of 1.5), its loss
// that of the capped logits formed by hand; then every optimised variant (whole, several chunks,
// split over two ranks, bf16) against its reference with the cap on, and lm_head_softcap.
TEST(Kernels, LmHeadSoftcapMatchesReferenceAndGradients) {
  const int N = 5, C = 8, V = 13, Vp = 64;
  const double cap = 1.5;
  auto x = random_vector(N * C, 51, 2.0), w = random_vector(Vp * C, 52);
  std::vector<int32_t> tgt = {4, -1, 12, 0, 4};
  std::vector<double> losses(N);
  auto loss = [&] {
    ref::lm_head_cross_entropy<double>(losses.data(), nullptr, nullptr, x.data(), w.data(), tgt.data(), N, C, V, 0.0,
                                       cap);
    double s = 0;
    for (double l : losses) s += l;
    return s;
  };
  std::vector<double> dx(N * C), dw(Vp * C, 0.0);
  ref::lm_head_cross_entropy(losses.data(), dx.data(), dw.data(), x.data(), w.data(), tgt.data(), N, C, V, 1.0, cap);
  EXPECT_LT(max_rel_error(dx, numeric_gradient(x, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dw, numeric_gradient(w, loss)), 1e-6);
  // row 0 by hand: log-sum-exp of the capped logits minus the capped target logit
  std::vector<double> z(V);
  double largest = 0;
  for (int v = 0; v < V; ++v) {
    double acc = 0;
    for (int c = 0; c < C; ++c) acc += x[c] * w[size_t(v) * C + c];
    largest = std::max(largest, std::fabs(acc));
    z[v] = cap * std::tanh(acc / cap);
  }
  EXPECT_GT(largest, cap) << "the cap must bend some logit";
  double sum = 0;
  for (double zv : z) sum += std::exp(zv);
  EXPECT_NEAR(losses[0], std::log(sum) - z[tgt[0]], 1e-12);

  const float capf = float(cap);
  expect_lm_head_matches_reference(to_f(x), to_f(w), tgt, N, C, V, Vp, capf);
  std::vector<int32_t> many(257);
  for (int i = 0; i < 257; ++i) many[i] = i % 17 == 5 ? -1 : static_cast<int32_t>((i * 7919) % 65537);
  expect_lm_head_matches_reference(to_f(random_vector(size_t(257) * 8, 53, 3.0)), to_f(random_vector(size_t(65600) * 8, 54)),
                                   many, 257, 8, 65537, 65600, capf);
  expect_split_matches_whole(&k::lm_head_cross_entropy, &k::lm_head_cross_entropy_split, 6, 16, 70, 128, capf);
  expect_split_matches_whole(&k::lm_head_cross_entropy, &ref_split, 6, 16, 70, 128, capf);
  expect_split_matches_whole(&whole_bf16, &split_bf16, 6, 16, 70, 128, capf);
  expect_split_matches_whole(&whole_bf16, &ref_split_bf16, 6, 16, 70, 128, capf);
  // against the fp32 head within 2e-2: the cap's slope 1 − tanh² is taken at logits that differ by
  // the operands' rounding, on top of the rounding itself
  expect_bf16_head_matches(6, 16, 70, 128, capf, 2e-2);

  std::vector<float> logits = to_f(random_vector(37, 55, 10.0)), want = logits;
  k::lm_head_softcap(logits.data(), logits.size(), capf);
  ref::lm_head_softcap(want.data(), want.size(), capf);
  EXPECT_LT(max_error_rel_to_max(logits.data(), want.data(), want.size()), 1e-6);
}
