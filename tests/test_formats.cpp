// Linear formats (model/formats/): DenseFormat is exactly the dense matmul kernels; MaskedFormat
// against the fp64 reference with W ⊙ M (forward, input gradient, dense weight gradient) and
// masked-out weights contributing nothing; Sparse24Format computing the same function as a
// MaskedFormat with its 2:4 mask; SparseFormat computing MaskedFormat's function with the weight
// gradient at the kept entries (or dense on request), on either side of its break-even density;
// every format's mask is its own copy; shape checks. Bf16Format on rounded operands, on an input
// stored in bf16, a bf16 model's plan of bf16 linear inputs, and its working copies written by
// the optimizer.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/matmul_ref.h"
#include "frugal/methods/sparse24/mask.h"
#include "frugal/model/formats/bf16.h"
#include "frugal/model/formats/dense.h"
#include "frugal/model/gpt.h"
#include "frugal/model/formats/masked.h"
#include "frugal/model/formats/sparse.h"
#include "frugal/model/formats/sparse24.h"
#include "frugal/optim/adamw.h"
#include "gradcheck.h"

using namespace frugal;
using frugal::testing::max_error_rel_to_max;
using frugal::testing::random_vector;

namespace {

constexpr int N = 13, IC = 24, OC = 20;

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// A random 0/1 mask keeping about one entry in `keep_one_in`.
std::vector<uint8_t> random_mask(size_t n, unsigned seed, int keep_one_in) {
  const std::vector<double> u = random_vector(n, seed);
  std::vector<uint8_t> mask(n);
  for (size_t i = 0; i < n; ++i) mask[i] = static_cast<int>(std::fabs(u[i]) * 1000) % keep_one_in == 0;
  return mask;
}

// What one format computes for fixed inputs: forward output and the three gradients.
struct Products {
  std::vector<float> out, dinp, dweight, dbias;
};

Products run(LinearFormat& f, const std::vector<float>& W, const std::vector<float>& bias,
             const std::vector<float>& X, const std::vector<float>& dY) {
  f.refresh(W.data(), OC, IC);
  Products p{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC),
             std::vector<float>(W.size(), 0.0f), std::vector<float>(OC, 0.0f)};
  f.forward(p.out.data(), X.data(), W.data(), bias.data(), N, IC, OC);
  f.backward(p.dinp.data(), p.dweight.data(), p.dbias.data(), dY.data(), X.data(), W.data(), N, IC,
             OC, false);
  return p;
}

// A 2-block model of width 16 over 11 tokens, 8 positions.
ModelConfig tiny_model() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 11;
  return c;
}

struct Inputs {
  std::vector<double> W = random_vector(size_t(OC) * IC, 1), bias = random_vector(OC, 2),
                      X = random_vector(size_t(N) * IC, 3), dY = random_vector(size_t(N) * OC, 4);
  std::vector<float> w = to_float(W), b = to_float(bias), x = to_float(X), dy = to_float(dY);
};

}  // namespace

TEST(DenseFormat, IsTheDenseMatmul) {
  const Inputs in;
  DenseFormat f;
  const Products got = run(f, in.w, in.b, in.x, in.dy);
  Products want{std::vector<float>(got.out.size()), std::vector<float>(got.dinp.size()),
                std::vector<float>(got.dweight.size(), 0.0f), std::vector<float>(OC, 0.0f)};
  kernels::matmul_forward(want.out.data(), in.x.data(), in.w.data(), in.b.data(), N, IC, OC);
  kernels::matmul_backward(want.dinp.data(), want.dweight.data(), want.dbias.data(), in.dy.data(),
                           in.x.data(), in.w.data(), N, IC, OC, false);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.dinp, want.dinp);
  EXPECT_EQ(got.dweight, want.dweight);
  EXPECT_EQ(got.dbias, want.dbias);
  EXPECT_EQ(f.forward_density(), 1.0);
  EXPECT_EQ(f.backward_input_density(), 1.0);
  EXPECT_EQ(f.weight_grad_density(), 1.0);
}

// The bf16 format: the dense matmul of the operands rounded to bf16 (exactly the bf16 kernels'
// products), within 1e-2 of fp32; the bias gradient is fp32's exactly.
TEST(Bf16Format, IsTheDenseMatmulOfRoundedOperands) {
  const Inputs in;
  Bf16Format f;
  const Products got = run(f, in.w, in.b, in.x, in.dy);
  const auto round_trip = [](const std::vector<float>& x) {
    std::vector<kernels::bf16> b(x.size());
    std::vector<float> out(x.size());
    kernels::f32_to_bf16(b.data(), x.data(), x.size());
    kernels::bf16_to_f32(out.data(), b.data(), b.size());
    return out;
  };
  const std::vector<float> w = round_trip(in.w), x = round_trip(in.x), dy = round_trip(in.dy);
  Products want{std::vector<float>(got.out.size()), std::vector<float>(got.dinp.size()),
                std::vector<float>(got.dweight.size(), 0.0f), std::vector<float>(OC, 0.0f)};
  kernels::ref::matmul_forward(want.out.data(), x.data(), w.data(), in.b.data(), N, IC, OC);
  kernels::ref::matmul_backward(want.dinp.data(), want.dweight.data(), static_cast<float*>(nullptr), dy.data(),
                                x.data(), w.data(), N, IC, OC, false);
  kernels::matmul_backward(nullptr, nullptr, want.dbias.data(), in.dy.data(), in.x.data(), in.w.data(), N, IC,
                           OC, false);
  EXPECT_LT(max_error_rel_to_max(got.out.data(), want.out.data(), got.out.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(got.dinp.data(), want.dinp.data(), got.dinp.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(got.dweight.data(), want.dweight.data(), got.dweight.size()), 1e-5);
  EXPECT_EQ(got.dbias, want.dbias);
  DenseFormat dense;
  const Products fp32 = run(dense, in.w, in.b, in.x, in.dy);
  EXPECT_LT(max_error_rel_to_max(got.out.data(), fp32.out.data(), got.out.size()), 1e-2);
  EXPECT_GT(max_error_rel_to_max(got.out.data(), fp32.out.data(), got.out.size()), 0.0);
}

// A linear's input stored in bf16 (the activations of a bf16 model): Bf16Format computes on it
// exactly what it computes on the fp32 input it was rounded from (so storing the activations in
// bf16 changes no bf16 run's numbers), and a format computing in fp32 (DenseFormat) computes on
// its values widened to fp32.
TEST(Bf16Format, TakesAnInputStoredInBf16AsTheFp32InputItWasRoundedFrom) {
  const Inputs in;
  std::vector<kernels::bf16> x16(in.x.size());
  kernels::f32_to_bf16(x16.data(), in.x.data(), in.x.size());
  std::vector<float> widened(in.x.size());
  kernels::bf16_to_f32(widened.data(), x16.data(), x16.size());
  ASSERT_NE(widened, in.x);
  const auto run_bf16_input = [&](LinearFormat& f) {
    f.refresh(in.w.data(), OC, IC);
    Products p{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC),
               std::vector<float>(in.w.size(), 0.0f), std::vector<float>(OC, 0.0f)};
    f.forward_bf16_input(p.out.data(), x16.data(), in.w.data(), in.b.data(), N, IC, OC);
    f.backward_bf16_input(p.dinp.data(), p.dweight.data(), p.dbias.data(), in.dy.data(), x16.data(), in.w.data(),
                          N, IC, OC, false);
    return p;
  };
  const auto expect_same = [](const Products& got, const Products& want) {
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.dinp, want.dinp);
    EXPECT_EQ(got.dweight, want.dweight);
    EXPECT_EQ(got.dbias, want.dbias);
  };
  Bf16Format bf16;
  EXPECT_TRUE(bf16.bf16_input());
  expect_same(run_bf16_input(bf16), run(bf16, in.w, in.b, in.x, in.dy));
  DenseFormat dense;
  EXPECT_FALSE(dense.bf16_input());
  expect_same(run_bf16_input(dense), run(dense, in.w, in.b, widened, in.dy));
}

// A bf16 model plans its linears' inputs in bf16 (BlockActs): per block and row, ln_1's and ln_2's
// outputs (C each) and the MLP activation (H) in bf16 only, and the attention output also in bf16
// (C): (2C + H)/2 - C/2 floats fewer, exactly what GPT::estimate_memory says for the BF16 dtype;
// setting the dtype re-plans a planned model, and it trains within 2e-2 of the fp32 loss.
TEST(Bf16Format, ABf16ModelKeepsItsLinearInputsInBf16) {
  const ModelConfig c = tiny_model();
  const int B = 2, T = 8, N = B * T;
  const double C = c.n_embd, H = double(c.ffn_hidden());
  const MemoryPlan fp32 = GPT::estimate_memory(c, B, T, {});
  const MemoryPlan bf16 = GPT::estimate_memory(c, B, T, {}, kernels::DType::BF16);
  const double saved = c.n_layer * N * ((2 * C + H) / 2 - C / 2) * sizeof(float);
  EXPECT_EQ(double(fp32.activations) - double(bf16.activations), saved);
  EXPECT_EQ(bf16.scratch, fp32.scratch);
  EXPECT_EQ(bf16.activation_dtype, kernels::DType::BF16);
  EXPECT_NE(bf16.describe(0).find("activations 0.0 MiB (linear inputs in bf16)"), std::string::npos);

  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[i] = (3 * i) % 11, targets[i] = (3 * i + 1) % 11;
  const auto loss_of = [&](GPT& model, bool dtype_after_plan) {
    model.init_weights(7);
    if (!dtype_after_plan) model.set_linear_dtype(kernels::DType::BF16);
    model.plan(B, T);
    if (dtype_after_plan) model.set_linear_dtype(kernels::DType::BF16);
    EXPECT_EQ(model.memory_plan().activations, bf16.activations);
    const float loss = model.forward(tokens.data(), targets.data(), 1.0f);
    model.backward();
    return loss;
  };
  GPT before(c), after(c), reference(c);
  const float loss = loss_of(before, false);
  EXPECT_EQ(loss_of(after, true), loss);
  EXPECT_EQ(std::vector<float>(after.grads(), after.grads() + after.table().total()),
            std::vector<float>(before.grads(), before.grads() + before.table().total()));
  reference.init_weights(7);
  reference.plan(B, T);
  const float fp32_loss = reference.forward(tokens.data(), targets.data(), 1.0f);
  EXPECT_NE(loss, fp32_loss);
  EXPECT_NEAR(loss, fp32_loss, 2e-2);
}

// An optimizer update through GPT::update_params writes the bf16 working copies of the linears and
// of the head (AdamW: adamw_update_bf16), and the next forward rounds none of them again: three
// AdamW steps give the losses of a model whose copies are rounded from the weights (params()), bit
// for bit; an update that changes a weight without writing its copy leaves the old copy in use
// (what shows that nothing re-rounds it), and a change through params() is rounded again.
TEST(Bf16Format, AnOptimizerUpdateWritesTheWorkingCopies) {
  const ModelConfig c = tiny_model();
  const int B = 2, T = 8, N = B * T;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[i] = (5 * i) % 11, targets[i] = (5 * i + 2) % 11;
  GPT fused(c), rounded(c);
  for (GPT* model : {&fused, &rounded}) {
    model->init_weights(3);
    model->set_linear_dtype(kernels::DType::BF16);
    model->plan(B, T);
  }
  AdamW fused_optim(fused.table(), {}), rounded_optim(rounded.table(), {});
  for (int step = 0; step < 3; ++step) {
    for (GPT* model : {&fused, &rounded}) {
      model->zero_grad();
      model->forward(tokens.data(), targets.data(), 1.0f);
      model->backward();
    }
    fused.update_params([&](float* params, const std::vector<WorkingCopy>& copies) {
      EXPECT_EQ(copies.size(), size_t(c.n_layer) * 4 + 1);  // qkv, proj, fc, fc_proj per block; the head
      fused_optim.update(params, fused.grads(), 0, 1e-2f, 0, copies);
    });
    rounded_optim.update(rounded.params(), rounded.grads(), 0, 1e-2f);
    EXPECT_EQ(fused.forward(tokens.data(), targets.data(), 0.0f),
              rounded.forward(tokens.data(), targets.data(), 0.0f)) << "step " << step;
  }
  const float before = fused.forward(tokens.data(), targets.data(), 0.0f);
  const size_t fc = fused.linear_weight_offset(0, GPT::Linear::Fc);
  const auto [oc, ic] = fused.linear_shape(GPT::Linear::Fc);
  fused.update_params([&](float* params, const std::vector<WorkingCopy>&) {
    for (int i = 0; i < oc * ic; ++i) params[fc + i] *= -1.0f;  // the copy not written
  });
  EXPECT_EQ(fused.forward(tokens.data(), targets.data(), 0.0f), before);
  fused.params()[fc] += 0.0f;  // a change through params(): every copy rounded again
  EXPECT_NE(fused.forward(tokens.data(), targets.data(), 0.0f), before);
}

// set_linear_dtype puts a Bf16Format on the linears that have the default format, leaves a
// method's format alone, and null restores the precision's default.
TEST(Bf16Format, IsTheDefaultOfABf16Model) {
  const ModelConfig c = tiny_model();
  GPT model(c);
  const auto [oc, ic] = model.linear_shape(GPT::Linear::Fc);
  model.set_linear_format(1, GPT::Linear::Fc, std::make_shared<MaskedFormat>(oc, ic, std::vector<uint8_t>(size_t(oc) * ic, 1)));
  model.set_linear_dtype(kernels::DType::BF16);
  EXPECT_STREQ(model.linear_format(0, GPT::Linear::Fc).name(), "bf16");
  EXPECT_STREQ(model.linear_format(0, GPT::Linear::Qkv).name(), "bf16");
  EXPECT_STREQ(model.linear_format(1, GPT::Linear::Fc).name(), "masked");
  model.set_linear_format(1, GPT::Linear::Fc, nullptr);
  EXPECT_STREQ(model.linear_format(1, GPT::Linear::Fc).name(), "bf16");
  model.set_linear_dtype(kernels::DType::F32);
  EXPECT_STREQ(model.linear_format(1, GPT::Linear::Fc).name(), "dense");
}

TEST(MaskedFormat, MatchesReferenceWithMaskedWeights) {
  const Inputs in;
  const std::vector<uint8_t> mask = random_mask(in.W.size(), 5, 7);  // ~86% sparse, like MST
  MaskedFormat f(OC, IC, mask);
  const Products got = run(f, in.w, in.b, in.x, in.dy);

  std::vector<double> masked = in.W;
  for (size_t i = 0; i < masked.size(); ++i)
    if (!mask[i]) masked[i] = 0;
  std::vector<double> out(got.out.size()), dinp(got.dinp.size()), dweight(in.W.size(), 0.0),
      dbias(OC, 0.0);
  kernels::ref::matmul_forward(out.data(), in.X.data(), masked.data(), in.bias.data(), N, IC, OC);
  kernels::ref::matmul_backward(dinp.data(), static_cast<double*>(nullptr), static_cast<double*>(nullptr),
                       in.dY.data(), in.X.data(), masked.data(), N, IC, OC, false);
  // straight-through: the weight gradient is the dense one, masked entries included
  kernels::ref::matmul_backward(static_cast<double*>(nullptr), dweight.data(), dbias.data(), in.dY.data(),
                       in.X.data(), in.W.data(), N, IC, OC, false);
  EXPECT_LT(max_error_rel_to_max(got.out.data(), out.data(), out.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(got.dinp.data(), dinp.data(), dinp.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(got.dweight.data(), dweight.data(), dweight.size()), 1e-5);
  EXPECT_LT(max_error_rel_to_max(got.dbias.data(), dbias.data(), dbias.size()), 1e-5);
  EXPECT_EQ(f.forward_density(), 1.0) << "dense GEMMs: dense FLOPs";
  EXPECT_EQ(f.backward_input_density(), 1.0);
  EXPECT_EQ(f.weight_grad_density(), 1.0);
}

TEST(MaskedFormat, MaskedOutWeightsContributeNothing) {
  const Inputs in;
  const std::vector<uint8_t> mask = random_mask(in.W.size(), 6, 3);
  std::vector<float> changed = in.w;
  for (size_t i = 0; i < changed.size(); ++i)
    if (!mask[i]) changed[i] = 1e6f;
  MaskedFormat f(OC, IC, mask);
  const Products a = run(f, in.w, in.b, in.x, in.dy);
  const Products b = run(f, changed, in.b, in.x, in.dy);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dinp, b.dinp);
  EXPECT_EQ(a.dweight, b.dweight);
}

TEST(Sparse24Format, ComputesTheMaskedFormatsFunction) {
  const Inputs in;
  for (bool transposable : {true, false}) {
    SCOPED_TRACE(transposable ? "transposable" : "row-only");
    std::vector<uint8_t> mask(in.w.size());
    if (transposable)
      sparse24::transposable_mask_24(in.w.data(), OC, IC, mask.data());
    else
      sparse24::row_mask_24(in.w.data(), OC, IC, mask.data());
    Sparse24Format s(OC, IC, mask, transposable, false);
    MaskedFormat m(OC, IC, mask);
    const Products got = run(s, in.w, in.b, in.x, in.dy), want = run(m, in.w, in.b, in.x, in.dy);
    EXPECT_LT(max_error_rel_to_max(got.out.data(), want.out.data(), want.out.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(got.dinp.data(), want.dinp.data(), want.dinp.size()), 1e-5);
    EXPECT_EQ(got.dweight, want.dweight);
    EXPECT_EQ(got.dbias, want.dbias);
    EXPECT_EQ(s.forward_density(), 0.5);
    EXPECT_EQ(s.backward_input_density(), transposable ? 0.5 : 1.0);
  }
}

// SparseFormat = MaskedFormat on the same mask, except that the weight gradient changes the kept
// entries only (their values are MaskedFormat's), unless set_dense_weight_grad; the same with the
// sparse kernels (density ≤ break-even) and with the dense GEMMs (break-even below the density),
// each reporting the densities of what it executes.
TEST(SparseFormat, ComputesTheMaskedFormatsFunctionOnBothSidesOfTheBreakEven) {
  const Inputs in;
  for (int keep_one_in : {10, 3, 1}) {
    const std::vector<uint8_t> mask = random_mask(in.w.size(), 9, keep_one_in);
    double density = 0;
    for (uint8_t m : mask) density += m;
    density /= static_cast<double>(mask.size());
    MaskedFormat m(OC, IC, mask);
    const Products want = run(m, in.w, in.b, in.x, in.dy);
    for (double break_even : {0.0, SparseFormat::kDefaultBreakEven, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "density " << density << ", break-even " << break_even);
      SparseFormat s(OC, IC, mask, break_even);
      const bool sparse = density <= break_even;
      for (bool dense_grad : {false, true}) {
        s.set_dense_weight_grad(dense_grad);
        const Products got = run(s, in.w, in.b, in.x, in.dy);
        EXPECT_EQ(s.sparse_kernels(), sparse);
        EXPECT_LT(max_error_rel_to_max(got.out.data(), want.out.data(), want.out.size()), 1e-5);
        EXPECT_LT(max_error_rel_to_max(got.dinp.data(), want.dinp.data(), want.dinp.size()), 1e-5);
        std::vector<float> want_dw = want.dweight;
        if (!dense_grad)
          for (size_t i = 0; i < mask.size(); ++i) want_dw[i] *= mask[i];
        EXPECT_LT(max_error_rel_to_max(got.dweight.data(), want_dw.data(), want_dw.size()), 1e-5);
        for (size_t i = 0; i < mask.size(); ++i)
          if (!mask[i] && !dense_grad && got.dweight[i] != 0.0f) FAIL() << "dW changed at " << i;
        EXPECT_EQ(got.dbias, want.dbias);
        EXPECT_DOUBLE_EQ(s.density(), density);
        EXPECT_EQ(s.forward_density(), sparse ? density : 1.0);
        EXPECT_EQ(s.backward_input_density(), sparse ? density : 1.0);
        EXPECT_EQ(s.weight_grad_density(), sparse && !dense_grad ? density : 1.0);
      }
    }
  }
}

// A mask change is picked up at the next refresh (re-pack), across the break-even both ways.
TEST(SparseFormat, NewMaskTakesEffectAtTheNextRefresh) {
  const Inputs in;
  const std::vector<uint8_t> sparse_mask = random_mask(in.w.size(), 10, 10),
                             dense_mask = random_mask(in.w.size(), 11, 2);
  SparseFormat s(OC, IC, sparse_mask, 0.3);
  for (const auto* mask : {&sparse_mask, &dense_mask, &sparse_mask}) {
    s.set_mask(*mask);
    MaskedFormat m(OC, IC, *mask);
    const Products got = run(s, in.w, in.b, in.x, in.dy), want = run(m, in.w, in.b, in.x, in.dy);
    EXPECT_LT(max_error_rel_to_max(got.out.data(), want.out.data(), want.out.size()), 1e-5);
    EXPECT_LT(max_error_rel_to_max(got.dinp.data(), want.dinp.data(), want.dinp.size()), 1e-5);
  }
}

// A format never reads the caller's mask after set_mask (or its constructor) returned.
TEST(LinearFormats, MaskIsACopy) {
  const Inputs in;
  std::vector<uint8_t> mask(in.w.size()), other = random_mask(in.w.size(), 8, 2);
  sparse24::transposable_mask_24(in.w.data(), OC, IC, mask.data());
  MaskedFormat masked(OC, IC, other);
  masked.set_mask(mask);
  Sparse24Format sparse(OC, IC, mask, true, false);
  const Products masked_before = run(masked, in.w, in.b, in.x, in.dy);
  const Products sparse_before = run(sparse, in.w, in.b, in.x, in.dy);
  const std::vector<uint8_t> original = mask;
  for (auto& m : mask) m = 1;  // not a 2:4 mask: repacking it would throw
  EXPECT_EQ(std::vector<uint8_t>(masked.mask().begin(), masked.mask().end()), original);
  EXPECT_EQ(std::vector<uint8_t>(sparse.mask().begin(), sparse.mask().end()), original);
  EXPECT_EQ(run(masked, in.w, in.b, in.x, in.dy).out, masked_before.out);
  EXPECT_EQ(run(sparse, in.w, in.b, in.x, in.dy).out, sparse_before.out);
  // and a new mask does take effect at the next refresh
  sparse.set_mask(mask);
  EXPECT_THROW(sparse.refresh(in.w.data(), OC, IC), Error);
}

TEST(LinearFormats, ShapesAreChecked) {
  const std::vector<uint8_t> mask(size_t(OC) * IC, 1);
  EXPECT_THROW(MaskedFormat(OC, IC + 1, mask), Error);
  MaskedFormat f(OC, IC, mask);
  EXPECT_THROW(f.set_mask(std::vector<uint8_t>(mask.size() - 1, 1)), Error);
  const std::vector<float> w(mask.size() + OC, 0.0f);
  EXPECT_THROW(f.refresh(w.data(), OC, IC + 1), Error);
}
