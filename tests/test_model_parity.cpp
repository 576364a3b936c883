// The whole GPT against golden values from the PyTorch reference (tools/make_fixtures.py, computed
// in fp64): logits, loss, every parameter gradient, and the losses and parameters of 10 AdamW
// steps, for GELU / GEGLU / SwiGLU MLPs with tied and untied heads. Also a directional
// finite-difference check of the whole model's gradient, frozen-prefix behaviour, and the
// encoder (masked-LM objective): its gradient, bidirectional attention, the loss over masked rows.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/io/config.h"
#include "frugal/io/safetensors.h"
#include "frugal/model/decoder.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"
#include "frugal/train/run_config.h"
#include "error_of.h"
#include "gradcheck.h"
#include "model_grad.h"
#include "paths.h"

using namespace frugal;

namespace {

struct Fixture {
  io::SafeTensors st;
  ModelConfig config;
  int B = 0, T = 0;
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.st = io::read_safetensors(std::string(test_paths::test_data()) + "/fixtures/" + name + ".safetensors");
  auto c = nlohmann::json::parse(f.st.metadata.at("config"));
  f.config.vocab_size = c["vocab_size"];
  f.config.block_size = c["block_size"];
  f.config.n_layer = c["n_layer"];
  f.config.n_head = c["n_head"];
  f.config.n_embd = c["n_embd"];
  f.config.ffn_mult = c["ffn_mult"];
  f.config.mlp = parse_mlp_kind(c["mlp"]);
  f.config.tied_head = c["tied_head"];
  f.config.bias = c["bias"];
  auto b = nlohmann::json::parse(f.st.metadata.at("batch"));
  f.B = b["B"];
  f.T = b["T"];
  return f;
}

std::vector<double> f64(const io::TensorData& t) {
  EXPECT_EQ(t.dtype, io::DType::F64);
  std::vector<double> v(t.numel());
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(double));
  return v;
}

std::vector<int32_t> i32(const io::TensorData& t) {
  std::vector<int32_t> v(t.numel());
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(int32_t));
  return v;
}

void load_params(GPT& model, const io::SafeTensors& st) {
  for (const ParamInfo& e : model.table().entries()) {
    std::vector<float> v = st.at("param." + e.name).to_f32("param." + e.name);
    ASSERT_EQ(v.size(), e.numel) << e.name;
    std::memcpy(model.params() + e.offset, v.data(), v.size() * sizeof(float));
  }
}

// max |a - b| / max |b| over one tensor
double rel_err(const float* a, const std::vector<double>& b) {
  return frugal::testing::max_error_rel_to_max(a, b.data(), b.size());
}

class Parity : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Parity, LogitsLossAndGradientsMatchPyTorch) {
  Fixture f = load_fixture(GetParam());
  GPT model(f.config);
  load_params(model, f.st);
  model.plan(f.B, f.T);
  auto tokens = i32(f.st.at("tokens")), targets = i32(f.st.at("targets"));

  std::vector<float> logits(size_t(f.B) * f.T * f.config.vocab_size);
  model.logits(tokens.data(), f.B, f.T, logits.data());
  EXPECT_LT(rel_err(logits.data(), f64(f.st.at("logits"))), 1e-5);

  model.zero_grad();
  const float loss = model.forward(tokens.data(), targets.data(), 1.0f);
  const double golden = f64(f.st.at("loss"))[0];
  EXPECT_LT(std::fabs(loss - golden) / golden, 1e-5) << loss << " vs " << golden;
  model.backward();
  for (const ParamInfo& e : model.table().entries())
    EXPECT_LT(rel_err(model.grads() + e.offset, f64(f.st.at("grad." + e.name))), 1e-4) << e.name;
}

TEST_P(Parity, TenAdamWStepsMatchPyTorch) {
  Fixture f = load_fixture(GetParam());
  GPT model(f.config);
  load_params(model, f.st);
  model.plan(f.B, f.T);
  AdamWConfig oc;
  oc.lr = 1e-3f, oc.beta1 = 0.9f, oc.beta2 = 0.95f, oc.eps = 1e-8f, oc.weight_decay = 0.1f, oc.grad_clip = 0;
  AdamW optim(model.table(), oc);
  auto tokens = i32(f.st.at("tokens")), targets = i32(f.st.at("targets"));
  auto golden = f64(f.st.at("adamw_losses"));
  for (int step = 0; step < 10; ++step) {
    model.zero_grad();
    const float loss = model.forward(tokens.data(), targets.data(), 1.0f);
    EXPECT_LT(std::fabs(loss - golden[step]) / golden[step], 1e-5) << "step " << step;
    model.backward();
    optim.step(model.params(), model.grads(), 0, oc.lr);
  }
  // Parameters after 10 steps. The key part of c_attn.bias is skipped: its exact gradient is zero
  // (softmax ignores a per-row constant), so Adam turns float rounding noise into full-size steps
  // in both implementations. Elsewhere Adam's normalisation amplifies rounding in tiny gradients
  // a little (worst seen 1.8e-4), hence 3e-4 relative to the tensor's largest value: tight
  // enough that a missing weight decay (10 steps of lr·wd = 1e-4 each) fails.
  const int C = f.config.n_embd;
  for (const ParamInfo& e : model.table().entries()) {
    auto golden_final = f64(f.st.at("adamw_final." + e.name));
    std::vector<float> mine(model.params() + e.offset, model.params() + e.offset + e.numel);
    if (e.name.ends_with("c_attn.bias"))
      for (int i = C; i < 2 * C; ++i) mine[i] = static_cast<float>(golden_final[i]);
    EXPECT_LT(rel_err(mine.data(), golden_final), 3e-4) << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity,
                         ::testing::Values("gelu_tied", "gelu_untied", "geglu_tied", "swiglu_untied"));

// The mean cross-entropy computed in double from the model's float logits, plus the auxiliary
// losses of that forward (a mixture of experts' balancing losses, small: their rounding does not
// matter). GPT::forward returns the loss rounded to float, whose ulp (4.8e-7 at a loss of 4)
// quantises a central difference to steps of ulp / 2ε (1.2e-4 at ε = 2e-3): too coarse for
// tensors with small gradients.
static double loss_fp64(GPT& model, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
  const int B = model.batch(), T = model.seq_len(), V = model.config().vocab_size;
  std::vector<float> logits(size_t(B) * T * V);
  model.logits(tokens.data(), B, T, logits.data());
  double sum = 0;
  int valid = 0;
  for (int i = 0; i < B * T; ++i) {
    if (targets[i] < 0) continue;
    const float* z = logits.data() + size_t(i) * V;
    const double mx = *std::max_element(z, z + V);
    double e = 0;
    for (int v = 0; v < V; ++v) e += std::exp(z[v] - mx);
    sum += mx + std::log(e) - z[targets[i]];
    ++valid;
  }
  double auxiliary = 0;
  for (const auto& [name, value] : model.loss_terms().auxiliary) auxiliary += value;
  return sum / valid + auxiliary;
}

// Directional finite differences: for a pseudo-random direction d over params [begin, end),
// (L(θ + εd) − L(θ − εd)) / 2ε must match ⟨∇L, d⟩ from backward. Zero parameters (vocabulary
// padding rows) are not moved. `grads` is the gradient from backward at θ. With the loss in fp64
// the difference from the analytic value stays below 1e-5 on tensors with small gradients (float
// rounding in the forward; larger tensors add O(ε²) truncation, covered by the 1% relative part),
// so the absolute floor 5e-5 is well below the smallest per-tensor directional derivative
// (1.6e-4, h.1.ln_2.bias of the SwiGLU fixture): a tensor whose gradient is missing fails.
// `move_zeros`: move zero parameters too (a tensor initialised to zero, not padding).
static void expect_directional_match(GPT& model, const std::vector<float>& grads, size_t begin, size_t end,
                              const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                              float eps, const std::string& what, bool move_zeros = false) {
  float* p = model.params();
  std::vector<float> saved(p + begin, p + end), d(end - begin);
  double analytic = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    d[i] = saved[i] == 0.0f && !move_zeros ? 0.0f : static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    analytic += double(d[i]) * grads[begin + i];
  }
  auto loss_at = [&](float s) {
    for (size_t i = 0; i < d.size(); ++i) p[begin + i] = saved[i] + s * eps * d[i];
    return loss_fp64(model, tokens, targets);
  };
  const double numeric = (loss_at(1) - loss_at(-1)) / (2 * eps);
  std::copy(saved.begin(), saved.end(), p + begin);
  EXPECT_NEAR(numeric, analytic, 5e-5 + 1e-2 * std::fabs(analytic)) << what;
}

// The directional check run separately on every parameter tensor, at the model's current θ.
static void expect_directional_match_per_tensor(GPT& model, const std::vector<int32_t>& tokens,
                                                const std::vector<int32_t>& targets, float eps) {
  const std::vector<float> grads = frugal::testing::model_gradient(model, tokens, targets);
  for (const ParamInfo& e : model.table().entries())
    expect_directional_match(model, grads, e.offset, e.offset + e.numel, tokens, targets, eps, e.name);
}

// Per tensor, on the SwiGLU fixture with an untied head.
TEST(ModelGradient, DirectionalFiniteDifferencesPerTensor) {
  Fixture f = load_fixture("swiglu_untied");
  GPT model(f.config);
  load_params(model, f.st);
  model.plan(f.B, f.T);
  expect_directional_match_per_tensor(model, i32(f.st.at("tokens")), i32(f.st.at("targets")), 2e-3f);
}

// The randomly initialised models of the directional checks below: 2 blocks of width 16 with 2
// heads, vocabulary 37, weights N(0, 0.2), planned for B = 2, T = 8 with tokens (i·a) mod 37 and
// targets (i·b + o) mod 37.
constexpr int kGradB = 2, kGradT = 8;
static ModelConfig gradient_config() {
  ModelConfig c;
  c.vocab_size = 37, c.block_size = kGradT, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.init_std = 0.2f;
  return c;
}
struct GradientBatch {
  std::vector<int32_t> tokens, targets;
  GradientBatch(int a, int b, int o) : tokens(kGradB * kGradT), targets(kGradB * kGradT) {
    for (int i = 0; i < kGradB * kGradT; ++i) tokens[i] = (i * a) % 37, targets[i] = (i * b + o) % 37;
  }
};

// Without biases and with GEGLU, on a randomly initialised model with an untied head.
TEST(ModelGradient, NoBiasGegluDirectionalCheckPerTensor) {
  ModelConfig c = gradient_config();
  c.bias = false, c.mlp = MlpKind::Geglu, c.tied_head = false;
  GPT model(c);
  model.init_weights(5);
  EXPECT_EQ(model.table().find("transformer.h.0.attn.c_attn.bias"), nullptr);
  model.plan(kGradB, kGradT);
  const GradientBatch batch(7, 11, 3);
  expect_directional_match_per_tensor(model, batch.tokens, batch.targets, 1e-3f);
}

// Post-LN blocks (BERT's placement), with dropout off and on a gated, a GELU and a ReLU² MLP.
TEST(ModelGradient, PostLnDirectionalCheckPerTensor) {
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Swiglu, MlpKind::Relu2}) {
    SCOPED_TRACE(mlp_kind_name(mlp));
    ModelConfig c = gradient_config();
    c.norm = NormPlacement::Post, c.mlp = mlp, c.tied_head = mlp == MlpKind::Gelu;
    GPT model(c);
    model.init_weights(7);
    model.plan(kGradB, kGradT);
    const GradientBatch batch(3, 7, 2);
    expect_directional_match_per_tensor(model, batch.tokens, batch.targets, 1e-3f);
  }
}

// The ReLU² MLP (pre-LN, untied head, no gate projection): every tensor's gradient.
TEST(ModelGradient, Relu2MlpDirectionalCheckPerTensor) {
  ModelConfig c = gradient_config();
  c.mlp = MlpKind::Relu2, c.tied_head = false;
  GPT model(c);
  model.init_weights(4);
  EXPECT_EQ(model.table().find("transformer.h.0.mlp.c_gate.weight"), nullptr);
  model.plan(kGradB, kGradT);
  const GradientBatch batch(11, 5, 4);
  expect_directional_match_per_tensor(model, batch.tokens, batch.targets, 1e-3f);
}

// The modern block options: rotary positions (no wpe tensor), QK-norm and logit soft-capping, each
// alone and all three together (with a GELU and a SwiGLU MLP, tied and untied heads): every
// tensor's gradient. init_std 0.5 makes logits large enough that a cap of 2 bends them.
TEST(ModelGradient, RotaryQkNormSoftcapDirectionalCheckPerTensor) {
  struct Options { bool rotary, qk_norm; float softcap; MlpKind mlp; bool tied; };
  for (const Options o : {Options{true, false, 0, MlpKind::Gelu, true}, Options{false, true, 0, MlpKind::Gelu, true},
                          Options{false, false, 2, MlpKind::Gelu, false},
                          Options{true, true, 2, MlpKind::Swiglu, false}}) {
    SCOPED_TRACE(std::string(o.rotary ? "rotary " : "") + (o.qk_norm ? "qk_norm " : "") +
                 (o.softcap > 0 ? "softcap " : "") + mlp_kind_name(o.mlp));
    ModelConfig c = gradient_config();
    c.position = o.rotary ? PositionKind::Rotary : PositionKind::Learned, c.rope_base = 50;
    c.qk_norm = o.qk_norm, c.logit_softcap = o.softcap, c.mlp = o.mlp, c.tied_head = o.tied;
    c.init_std = 0.5f;
    GPT model(c);
    model.init_weights(12);
    EXPECT_EQ(model.table().find("transformer.wpe.weight") == nullptr, o.rotary);
    model.plan(kGradB, kGradT);
    const GradientBatch batch(5, 9, 2);
    expect_directional_match_per_tensor(model, batch.tokens, batch.targets, 1e-3f);
  }
}

// model.zero_init_proj: the output projections start at zero, so every block is the identity
// (its output is its input, bit for bit) and only the projections and what follows the blocks
// have a gradient; the directional check moves the zero projections too.
TEST(ModelGradient, ZeroInitProjectionsDirectionalCheckPerTensor) {
  ModelConfig c = gradient_config();
  c.mlp = MlpKind::Swiglu, c.tied_head = false, c.zero_init_proj = true;
  GPT model(c);
  model.init_weights(9);
  model.plan(kGradB, kGradT);
  const GradientBatch batch(5, 3, 1);
  const std::vector<int32_t>& tokens = batch.tokens;
  const std::vector<int32_t>& targets = batch.targets;
  const std::vector<float> grads = frugal::testing::model_gradient(model, tokens, targets);
  const size_t n = size_t(kGradB) * kGradT * c.n_embd;
  for (int l = 0; l < c.n_layer; ++l)
    EXPECT_TRUE(std::equal(model.block_output(l), model.block_output(l) + n, model.block_output(-1))) << l;
  for (const ParamInfo& e : model.table().entries()) {
    const bool projection = e.name.ends_with("c_proj.weight");
    const float* w = model.params() + e.offset;
    const auto all_zero = [](const float* x, size_t n) { return std::all_of(x, x + n, [](float v) { return v == 0.0f; }); };
    EXPECT_TRUE(!projection || all_zero(w, e.numel)) << e.name;
    const float* g = grads.data() + e.offset;
    const bool inside_branch = e.name.find(".attn.c_attn.") != std::string::npos ||
                               e.name.find(".mlp.c_fc.") != std::string::npos ||
                               e.name.find(".mlp.c_gate.") != std::string::npos ||
                               (e.name.starts_with("transformer.h.") && e.name.find(".ln_") != std::string::npos);
    EXPECT_TRUE(!(inside_branch || projection) || all_zero(g, e.numel) == inside_branch) << e.name;
    expect_directional_match(model, grads, e.offset, e.offset + e.numel, tokens, targets, 1e-3f, e.name, projection);
  }
}

// With a sparse attention pattern per block: backward must differentiate the forward it follows.
TEST(ModelGradient, SparseAttentionPatternsDirectionalCheckPerTensor) {
  ModelConfig c;
  c.vocab_size = 37, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  c.init_std = 0.2f;
  GPT model(c);
  model.init_weights(6);
  model.set_attention_pattern(0, frugal::kernels::AttentionPattern::local(3));
  model.set_attention_pattern(1, frugal::kernels::AttentionPattern::strided(2, 3));
  const int B = 2, T = 8;
  model.plan(B, T);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 5) % 37, targets[i] = (i * 13 + 1) % 37;
  expect_directional_match_per_tensor(model, tokens, targets, 1e-3f);
}

// A mixture of experts on every other block (GELU experts, top 2 of 4, with a shared expert) and
// on every block (SwiGLU experts without biases, each token to all 3: no choice can flip under the
// finite differences, whatever the weights), with both balancing losses: the gradient of every
// tensor, the router's included, is that of the cross-entropy plus the auxiliary losses. The
// balancing bias (a buffer, zero) gets none.
TEST(ModelGradient, MixtureOfExpertsDirectionalCheckPerTensor) {
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Swiglu}) {
    SCOPED_TRACE(mlp_kind_name(mlp));
    ModelConfig c;
    c.vocab_size = 37, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.init_std = 0.2f;
    c.mlp = mlp, c.bias = mlp == MlpKind::Gelu;
    const bool gelu = mlp == MlpKind::Gelu;
    c.moe.experts = gelu ? 4 : 3, c.moe.top_k = gelu ? 2 : 3, c.moe.hidden = 24, c.moe.every = gelu ? 2 : 1;
    c.moe.shared_expert = gelu;
    c.moe.aux_loss_coef = 0.1f, c.moe.z_loss_coef = 0.01f;  // large enough to show in every gradient
    GPT model(c);
    model.init_weights(8);
    ASSERT_NE(model.table().find("transformer.h.1.mlp.router.weight"), nullptr);
    EXPECT_EQ(model.table().find("transformer.h.0.mlp.router.weight") == nullptr, gelu);
    const int B = 2, T = 8;
    model.plan(B, T);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; ++i) tokens[i] = (i * 5) % 37, targets[i] = (i * 3 + 4) % 37;
    expect_directional_match_per_tensor(model, tokens, targets, 1e-3f);
    const std::vector<std::string> names = {"moe_balance", "moe_z"};
    ASSERT_EQ(model.loss_terms().auxiliary.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(model.loss_terms().auxiliary[i].first, names[i]);
  }
}

// The frozen prefix runs sample by sample (AutoCache serves its output in later micro-batches),
// so the trainable top's gradients match the full backward's to rounding, not to the bit.
TEST(ModelFreeze, FrozenPrefixGetsNoGradientAndTopMatchesFullBackward) {
  Fixture f = load_fixture("gelu_untied");
  GPT model(f.config);
  load_params(model, f.st);
  model.plan(f.B, f.T);
  auto tokens = i32(f.st.at("tokens")), targets = i32(f.st.at("targets"));
  model.zero_grad();
  model.forward(tokens.data(), targets.data(), 1.0f);
  model.backward();
  std::vector<float> full(model.grads(), model.grads() + model.num_floats());

  model.set_frozen_prefix(1);
  std::memset(model.grads(), 0, model.num_floats() * sizeof(float));
  model.forward(tokens.data(), targets.data(), 1.0f);
  model.backward();
  const size_t begin = model.trainable_begin();
  EXPECT_EQ(begin, model.table().layer_range(1).first);
  for (size_t i = 0; i < begin; ++i) ASSERT_EQ(model.grads()[i], 0.0f) << "frozen gradient at " << i;
  double scale = 0;
  for (size_t i = begin; i < model.num_floats(); ++i) scale = std::max(scale, double(std::fabs(full[i])));
  for (size_t i = begin; i < model.num_floats(); ++i)
    ASSERT_NEAR(model.grads()[i], full[i], 1e-5 * scale) << i;
}

// A sample's frozen-prefix output is the same bits whichever samples share its micro-batch and
// wherever it sits in it: AutoCache's exactness rests on it. (Computed with the batch's other rows,
// oneDNN's and OpenBLAS's AVX2 GEMMs gave a row different last bits: FRUGAL_ISA=avx2 showed it.)
TEST(ModelFreeze, FrozenPrefixOutputOfASampleDoesNotDependOnItsCompanions) {
  Fixture f = load_fixture("gelu_untied");
  ASSERT_GE(f.B, 2);
  GPT model(f.config);
  load_params(model, f.st);
  model.set_frozen_prefix(f.config.n_layer);
  const int B = f.B, T = f.T, C = f.config.n_embd;
  const auto tokens = i32(f.st.at("tokens")), targets = i32(f.st.at("targets"));
  model.plan(B, T);
  model.forward(tokens.data(), targets.data(), 0.0f);
  const std::vector<float> batch(model.output(), model.output() + size_t(B) * T * C);
  // Each sample again, now alone in a micro-batch of one, then in the batch reversed.
  model.plan(1, T);
  for (int b = 0; b < B; ++b) {
    model.forward(tokens.data() + size_t(b) * T, targets.data() + size_t(b) * T, 0.0f);
    ASSERT_EQ(0, std::memcmp(model.output(), batch.data() + size_t(b) * T * C, sizeof(float) * T * C)) << b;
  }
  std::vector<int32_t> reversed_tokens(tokens.size()), reversed_targets(targets.size());
  for (int b = 0; b < B; ++b) {
    std::copy_n(tokens.data() + size_t(b) * T, T, reversed_tokens.data() + size_t(B - 1 - b) * T);
    std::copy_n(targets.data() + size_t(b) * T, T, reversed_targets.data() + size_t(B - 1 - b) * T);
  }
  model.plan(B, T);
  model.forward(reversed_tokens.data(), reversed_targets.data(), 0.0f);
  for (int b = 0; b < B; ++b)
    ASSERT_EQ(0, std::memcmp(model.output() + size_t(B - 1 - b) * T * C, batch.data() + size_t(b) * T * C,
                             sizeof(float) * T * C)) << b;
}

// ---- the encoder (model.objective = mlm) ----

// An encoder of the gradient checks' shape whose targets are the tokens at a few positions (the
// masked ones), -1 elsewhere.
static ModelConfig encoder_config(NormPlacement norm) {
  ModelConfig c = gradient_config();
  c.objective = ObjectiveKind::Mlm, c.norm = norm;
  return c;
}
static std::vector<int32_t> masked_targets(const GradientBatch& batch) {
  std::vector<int32_t> targets(batch.tokens.size(), -1);
  for (size_t i = 1; i < targets.size(); i += 3) targets[i] = batch.targets[i];
  return targets;
}

// Every tensor of a post-LN (BERT) and a pre-LN encoder, the masked-LM head's (dense, its
// LayerNorm, the output bias, the tied decoder) and the embedding LayerNorm's among them: the
// head's gradient and the whole encoder's against directional finite differences. The loss is
// the mean cross-entropy over the masked positions only (loss_fp64 over the full logits).
TEST(ModelGradient, EncoderDirectionalCheckPerTensor) {
  for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre}) {
    SCOPED_TRACE(norm_placement_name(norm));
    GPT model(encoder_config(norm));
    model.init_weights(8);
    for (const char* name : {"lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.bias",
                             "transformer.ln_emb.weight"})
      EXPECT_NE(model.table().find(name), nullptr) << name;
    EXPECT_EQ(model.table().find("transformer.ln_f.weight") != nullptr, norm == NormPlacement::Pre);
    // A non-zero output bias and LayerNorm shifts, so that their gradients' directions are checked.
    for (const char* name : {"lm_head.bias", "transformer.ln_emb.bias", "lm_head.layer_norm.bias"}) {
      const ParamInfo& e = model.table().at(name);
      for (size_t i = 0; i < e.numel; ++i) model.params()[e.offset + i] = 0.1f * float((i * 7) % 11) - 0.5f;
    }
    model.plan(kGradB, kGradT);
    const GradientBatch batch(3, 7, 2);
    const std::vector<int32_t> targets = masked_targets(batch);
    EXPECT_NEAR(model.forward(batch.tokens.data(), targets.data(), 0.0f), loss_fp64(model, batch.tokens, targets),
                1e-5);
    expect_directional_match_per_tensor(model, batch.tokens, targets, 1e-3f);
  }
}

// An encoder's attention sees later positions: changing the last token changes the first
// position's logits (a causal decoder's stay, bit for bit). Decoding token by token is refused.
TEST(Encoder, AttentionIsBidirectionalAndDecodingIsRefused) {
  for (ObjectiveKind objective : {ObjectiveKind::Mlm, ObjectiveKind::Causal}) {
    ModelConfig c = gradient_config();
    c.objective = objective;
    GPT model(c);
    model.init_weights(3);
    EXPECT_EQ(model.attention_pattern(0).is_causal(), objective == ObjectiveKind::Causal);
    std::vector<int32_t> tokens = GradientBatch(5, 3, 1).tokens;
    std::vector<float> before(size_t(kGradB) * kGradT * c.vocab_size), after(before.size());
    model.logits(tokens.data(), kGradB, kGradT, before.data());
    tokens[kGradT - 1] = (tokens[kGradT - 1] + 1) % c.vocab_size;
    model.logits(tokens.data(), kGradB, kGradT, after.data());
    const bool first_row_same = std::equal(before.begin(), before.begin() + c.vocab_size, after.begin());
    EXPECT_EQ(first_row_same, objective == ObjectiveKind::Causal);
    if (objective == ObjectiveKind::Mlm) {
      try {
        Decoder decoder(model);
        ADD_FAILURE() << "an encoder was decoded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("encoder"), std::string::npos) << e.what();
      }
    }
  }
}

// The head runs on the rows with a target only: rows without one change neither the loss nor any
// gradient, and a batch without any target has loss 0 and no head gradient.
TEST(Encoder, MaskedLmLossIgnoresRowsWithoutTargets) {
  GPT model(encoder_config(NormPlacement::Post));
  model.init_weights(2);
  model.plan(kGradB, kGradT);
  const GradientBatch batch(3, 7, 2);
  const std::vector<int32_t> targets = masked_targets(batch);
  const std::vector<float> grads = frugal::testing::model_gradient(model, batch.tokens, targets);
  const float loss = model.loss_terms().loss;
  std::vector<int32_t> none(targets.size(), -1);
  const std::vector<float> no_grads = frugal::testing::model_gradient(model, batch.tokens, none);
  EXPECT_EQ(model.loss_terms().loss, 0.0f);
  EXPECT_TRUE(std::all_of(no_grads.begin(), no_grads.end(), [](float g) { return g == 0.0f; }));
  EXPECT_GT(loss, 0.0f);
  EXPECT_TRUE(std::any_of(grads.begin(), grads.end(), [](float g) { return g != 0.0f; }));
}

