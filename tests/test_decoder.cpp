// Tests of key/value-cached decoding: the attention_decode kernel (optimised float against the
// fp64 reference, and against a row of the full causal attention), the Decoder's logits against
// GPT::logits of the whole sequence at every position (GELU and SwiGLU, tied and untied heads,
// sparse attention patterns, across a slide of the window), and generate() against sampling from
// full re-runs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/attention_ref.h"
#include "frugal/model/decoder.h"
#include "frugal/model/gpt.h"
#include "frugal/model/linear_format.h"
#include "frugal/train/sampler.h"
#include "gradcheck.h"
#include "optimised_kernels.h"

namespace {

using frugal::Decoder;
using frugal::GPT;
using frugal::ModelConfig;
using frugal::MlpKind;
using frugal::testing::max_rel_error;
using frugal::testing::random_vector;

// ---- attention_decode kernel ----

struct DecodeShape {
  int t, C, NH;
};

TEST(AttentionDecode, MatchesReference) {
  const frugal::testing::ScopedOptimisedKernels optimised;
  // t below, at and across multiples of 8; head sizes 8 .. 64; the last shape is big enough
  // (t * C >= 2^15) to run its heads on several threads.
  for (const DecodeShape s : {DecodeShape{1, 16, 2}, {7, 16, 2}, {8, 48, 6}, {9, 64, 2},
                              {33, 192, 4}, {300, 128, 2}, {100, 768, 12}}) {
    SCOPED_TRACE(fmt::format("t={} C={} NH={}", s.t, s.C, s.NH));
    // Values in [-2, 2): scores of std ~1.3 give softmax rows far from uniform.
    const auto q = random_vector(s.C, 1, 2.0), k = random_vector(size_t(s.t) * s.C, 2, 2.0),
               v = random_vector(size_t(s.t) * s.C, 3, 2.0);
    std::vector<double> expected(s.C);
    frugal::kernels::ref::attention_decode(expected.data(), q.data(), k.data(), v.data(), s.t, s.C, s.NH, {});
    const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
    std::vector<float> out(s.C, NAN);
    frugal::kernels::attention_decode(out.data(), qf.data(), kf.data(), vf.data(), s.t, s.C, s.NH, {});
    EXPECT_LT(max_rel_error(expected, std::vector<double>(out.begin(), out.end())), 2e-6);
  }
}

TEST(AttentionDecode, EqualsLastRowOfCausalAttention) {
  const frugal::testing::ScopedOptimisedKernels optimised;
  const int T = 70, C = 64, NH = 4;
  const auto qkv_d = random_vector(size_t(T) * 3 * C, 4, 2.0);
  const std::vector<float> qkv(qkv_d.begin(), qkv_d.end());
  std::vector<float> full(size_t(T) * C), lse(size_t(NH) * T);
  frugal::kernels::attention_forward(full.data(), lse.data(), qkv.data(), 1, T, C, NH, {});
  // The decode inputs: the last query and the keys/values of every position, as a cache holds them.
  std::vector<float> kc(size_t(T) * C), vc(size_t(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      kc[size_t(t) * C + c] = qkv[size_t(t) * 3 * C + C + c];
      vc[size_t(t) * C + c] = qkv[size_t(t) * 3 * C + 2 * C + c];
    }
  std::vector<float> out(C);
  frugal::kernels::attention_decode(out.data(), qkv.data() + size_t(T - 1) * 3 * C, kc.data(),
                                    vc.data(), T, C, NH, {});
  for (int c = 0; c < C; ++c) EXPECT_NEAR(out[c], full[size_t(T - 1) * C + c], 1e-5) << "column " << c;
}

TEST(AttentionDecode, RejectsBadHeadSize) {
  const frugal::testing::ScopedOptimisedKernels optimised;
  std::vector<float> x(12 * 2, 0.0f), out(12);
  EXPECT_THROW(frugal::kernels::attention_decode(out.data(), x.data(), x.data(), x.data(), 2, 12, 3, {}),
               frugal::Error);
}

// ---- Decoder against full forward passes ----

ModelConfig small_config(MlpKind mlp, bool tied) {
  ModelConfig c;
  c.vocab_size = 50;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.mlp = mlp;
  c.tied_head = tied;
  return c;
}

// A model whose every parameter (biases and LayerNorm gains included) is random, so no term of
// the forward pass is trivially zero or one.
std::unique_ptr<GPT> random_model(const ModelConfig& c, uint64_t seed) {
  auto model = std::make_unique<GPT>(c);
  frugal::Rng rng(seed, 0);
  for (size_t i = 0; i < model->num_floats(); ++i) model->params()[i] = static_cast<float>(0.3 * rng.normal());
  return model;
}

// Logits (T,V) of every position of `tokens` from one full forward pass.
std::vector<float> full_logits(GPT& model, const std::vector<int32_t>& tokens) {
  const int T = static_cast<int>(tokens.size()), V = model.config().vocab_size;
  std::vector<float> out(size_t(T) * V);
  model.logits(tokens.data(), 1, T, out.data());
  return out;
}

// |got - expected| relative to the largest logit of the row.
void expect_logits_near(const float* got, const float* expected, int V, const std::string& where) {
  float scale = 1.0f;
  for (int v = 0; v < V; ++v) scale = std::max(scale, std::fabs(expected[v]));
  float worst = 0.0f;
  for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs(got[v] - expected[v]) / scale);
  EXPECT_LT(worst, 1e-4f) << where;
}

std::vector<int32_t> random_tokens(int n, int V, uint64_t seed) {
  frugal::Rng rng(seed, 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(V));
  return t;
}

struct Variant {
  MlpKind mlp;
  bool tied;
};
void PrintTo(const Variant& v, std::ostream* os) {
  *os << frugal::mlp_kind_name(v.mlp) << (v.tied ? " tied" : " untied");
}

// The Decoder's logits equal GPT::logits at every position of a sequence that slides the window.
void expect_decoder_matches_gpt(GPT* model) {
  const ModelConfig& c = model->config();
  const int V = c.vocab_size, block = c.block_size, prompt = 5, total = 40;
  const std::vector<int32_t> tokens = random_tokens(total, V, 3);

  // Up to the window's end the cache covers the whole sequence: compare against one forward.
  const std::vector<int32_t> first(tokens.begin(), tokens.begin() + block);
  const std::vector<float> expected = full_logits(*model, first);
  Decoder dec(*model);
  const float* logits = dec.prefill(std::span<const int32_t>(tokens.data(), prompt));
  expect_logits_near(logits, &expected[size_t(prompt - 1) * V], V, "prefill");
  for (int pos = prompt; pos < block; ++pos) {
    logits = dec.step(tokens[pos]);
    expect_logits_near(logits, &expected[size_t(pos) * V], V, fmt::format("step at position {}", pos));
  }
  // Past it the window slides by block/2 tokens: compare against a forward over the window.
  for (int pos = block; pos < total; ++pos) {
    logits = dec.step(tokens[pos]);
    const std::vector<int32_t>& window = dec.context();
    const int expected_len = (pos - block) % (block / 2 + 1) + block / 2;  // 8, 9, .., 16, 8, ..
    ASSERT_EQ(static_cast<int>(window.size()), expected_len) << "position " << pos;
    ASSERT_TRUE(std::equal(window.begin(), window.end(), tokens.begin() + pos + 1 - expected_len));
    const std::vector<float> win = full_logits(*model, window);
    expect_logits_near(logits, &win[size_t(window.size() - 1) * V], V,
                       fmt::format("step at position {} (window of {})", pos, window.size()));
  }
}

class DecoderMatchesGpt : public ::testing::TestWithParam<Variant> {};

TEST_P(DecoderMatchesGpt, AtEveryPositionAndAcrossSlides) {
  expect_decoder_matches_gpt(random_model(small_config(GetParam().mlp, GetParam().tied), 7).get());
}

// Each block under its own sparse pattern: the cached steps attend exactly the pattern's keys.
TEST(Decoder, MatchesGptWithSparseAttentionPatterns) {
  using frugal::kernels::AttentionPattern;
  for (const auto& [first, second] :
       {std::pair{AttentionPattern::local(3), AttentionPattern::strided(2, 3)},
        std::pair{AttentionPattern::fixed(4, 1), AttentionPattern::causal()}}) {
    SCOPED_TRACE(first.name() + " / " + second.name());
    auto model = random_model(small_config(MlpKind::Gelu, true), 9);
    model->set_attention_pattern(0, first);
    model->set_attention_pattern(1, second);
    EXPECT_EQ(model->attention_pattern(0), first);
    expect_decoder_matches_gpt(model.get());
  }
}

// Post-LN blocks (BERT's placement) decode through the same block forward.
TEST(Decoder, MatchesGptWithPostLnBlocks) {
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Geglu}) {
    SCOPED_TRACE(mlp_kind_name(mlp));
    ModelConfig c = small_config(mlp, false);
    c.norm = frugal::NormPlacement::Post;
    expect_decoder_matches_gpt(random_model(c, 11).get());
  }
}

// Rotary positions turn each cached key by its own position and each decoded query by the new one;
// with QK-norm and a logit soft-cap as well (a capped logit is what sampling sees).
TEST(Decoder, MatchesGptWithRotaryQkNormAndSoftcap) {
  ModelConfig c = small_config(MlpKind::Swiglu, false);
  c.position = frugal::PositionKind::Rotary;
  expect_decoder_matches_gpt(random_model(c, 15).get());
  c.qk_norm = true, c.logit_softcap = 5.0f;
  expect_decoder_matches_gpt(random_model(c, 16).get());
}

// Mixture-of-experts blocks (with a dense one between them: two sets of internals) route each
// decoded row as the full forward routes it, with the balancing bias steering the choice.
TEST(Decoder, MatchesGptWithMixtureOfExperts) {
  ModelConfig c = small_config(MlpKind::Swiglu, true);
  c.n_layer = 3, c.moe.experts = 4, c.moe.top_k = 2, c.moe.every = 2, c.moe.shared_expert = true;
  expect_decoder_matches_gpt(random_model(c, 13).get());
  c.moe.every = 1;
  expect_decoder_matches_gpt(random_model(c, 14).get());
}

INSTANTIATE_TEST_SUITE_P(Variants, DecoderMatchesGpt,
                         ::testing::Values(Variant{MlpKind::Gelu, true}, Variant{MlpKind::Gelu, false},
                                           Variant{MlpKind::Swiglu, true},
                                           Variant{MlpKind::Swiglu, false}, Variant{MlpKind::Relu2, true}),
                         [](const auto& info) {
                           return std::string(frugal::mlp_kind_name(info.param.mlp)) +
                                  (info.param.tied ? "_tied" : "_untied");
                         });

TEST(Decoder, LongPrefillKeepsTheLastBlockAndResetRestarts) {
  const ModelConfig c = small_config(MlpKind::Gelu, true);
  auto model = random_model(c, 8);
  const std::vector<int32_t> tokens = random_tokens(25, c.vocab_size, 4);
  Decoder dec(*model);
  const std::vector<float> first = [&] {
    const float* l = dec.prefill(tokens);
    return std::vector<float>(l, l + c.vocab_size);
  }();
  const std::vector<int32_t> tail(tokens.end() - c.block_size, tokens.end());
  EXPECT_EQ(dec.context(), tail);
  const std::vector<float> expected = full_logits(*model, tail);
  expect_logits_near(first.data(), &expected[size_t(c.block_size - 1) * c.vocab_size], c.vocab_size,
                     "long prefill");
  dec.reset();
  EXPECT_TRUE(dec.context().empty());
  EXPECT_THROW(dec.step(1), frugal::Error);
}

// A linear format that multiplies with every other input column of the weight zeroed (a stand-in
// for a sparse format): the decoder must run it exactly as the full forward does.
class HalfColumnsFormat final : public frugal::LinearFormat {
 public:
  const char* name() const override { return "half-columns"; }
  void refresh(const float* weight, int OC, int C) override {
    masked_.assign(weight, weight + size_t(OC) * C);
    for (size_t i = 0; i < masked_.size(); i += 2) masked_[i] = 0.0f;
  }
  void forward(float* out, const float* inp, const float*, const float* bias, int N, int C,
               int OC) override {
    frugal::kernels::matmul_forward(out, inp, masked_.data(), bias, N, C, OC);
  }
  void backward(float*, float*, float*, const float*, const float*, const float*, int, int, int,
                bool) override {
    FAIL() << "inference runs no backward";
  }
  double forward_density() const override { return 0.5; }
  double backward_input_density() const override { return 0.5; }
  double weight_grad_density() const override { return 0.5; }

 private:
  std::vector<float> masked_;
};

TEST(Decoder, RunsInstalledLinearFormats) {
  const ModelConfig c = small_config(MlpKind::Swiglu, true);
  auto model = random_model(c, 12);
  const std::vector<int32_t> tokens = random_tokens(12, c.vocab_size, 7);
  const std::vector<float> dense = full_logits(*model, tokens);
  for (int l = 0; l < c.n_layer; ++l)
    for (GPT::Linear which : {GPT::Linear::Qkv, GPT::Linear::Gate, GPT::Linear::FcProj})
      model->set_linear_format(l, which, std::make_shared<HalfColumnsFormat>());
  const std::vector<float> expected = full_logits(*model, tokens);
  ASSERT_NE(expected, dense);  // the format changes the model
  Decoder dec(*model);
  expect_logits_near(dec.prefill(std::span<const int32_t>(tokens.data(), 4)), &expected[3 * c.vocab_size],
                     c.vocab_size, "prefill");
  for (size_t pos = 4; pos < tokens.size(); ++pos)
    expect_logits_near(dec.step(tokens[pos]), &expected[pos * c.vocab_size], c.vocab_size,
                       fmt::format("position {}", pos));
}

// Evaluation (GPT::logits, the decoder) runs without dropout even when the model trains with it.
TEST(Decoder, NoDropoutInEvaluation) {
  ModelConfig c = small_config(MlpKind::Gelu, true);
  c.dropout = 0.5f;
  auto model = random_model(c, 11);
  const std::vector<int32_t> tokens = random_tokens(10, c.vocab_size, 6);
  const std::vector<float> expected = full_logits(*model, tokens);
  EXPECT_EQ(full_logits(*model, tokens), expected);
  Decoder dec(*model);
  expect_logits_near(dec.prefill(std::span<const int32_t>(tokens.data(), 1)), expected.data(),
                     c.vocab_size, "position 0");
  for (size_t pos = 1; pos < tokens.size(); ++pos)
    expect_logits_near(dec.step(tokens[pos]), &expected[pos * c.vocab_size], c.vocab_size,
                       fmt::format("position {}", pos));
}

TEST(Decoder, RejectsBadTokens) {
  const ModelConfig c = small_config(MlpKind::Gelu, true);
  auto model = random_model(c, 9);
  Decoder dec(*model);
  EXPECT_THROW(dec.prefill({}), frugal::Error);
  const std::vector<int32_t> bad{1, c.vocab_size};
  EXPECT_THROW(dec.prefill(bad), frugal::Error);
  dec.prefill(std::vector<int32_t>{1, 2});
  EXPECT_THROW(dec.step(-1), frugal::Error);
}

// generate() with the cache draws the same tokens as sampling from a full forward per token,
// while the context fits the window (identical logits up to float rounding).
TEST(Generate, MatchesFullRerunSampling) {
  const ModelConfig c = small_config(MlpKind::Swiglu, false);
  auto model = random_model(c, 10);
  const frugal::SampleOptions o{.max_tokens = 12, .temperature = 0.9, .top_k = 20, .top_p = 0.95, .seed = 5};
  const std::vector<int32_t> prompt{3, 1, 4};
  std::vector<int32_t> streamed;
  const std::vector<int32_t> got =
      frugal::generate(*model, prompt, o, [&](int32_t id) { streamed.push_back(id); });

  std::vector<int32_t> expected = prompt;
  frugal::Rng rng(o.seed, 11);  // the stream generate() draws from
  for (int n = 0; n < o.max_tokens; ++n) {
    const std::vector<float> logits = full_logits(*model, expected);
    expected.push_back(frugal::sample_token(&logits[(expected.size() - 1) * c.vocab_size],
                                            c.vocab_size, o, rng.uniform()));
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(streamed, std::vector<int32_t>(expected.begin() + prompt.size(), expected.end()));
}

}  // namespace
