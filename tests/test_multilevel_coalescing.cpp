// The multi-level operators (methods/multilevel/coalescing.h): coalescing and de-coalescing agree
// with an fp64 reference built from the explicit coalescing matrices of the method (W' = L·W·R per
// tensor, layers mixed by R[i,j] = 1/|g_i|) over configurations covering every model option and
// uneven layer groups; coalesce∘decoalesce is the identity; width de-coalescing preserves the
// logits (and fails to without the final LayerNorm's 1/k); depth coalescing of identical layers is
// exact; errors name their key; interpolation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"
#include "frugal/core/error.h"
#include "frugal/methods/multilevel/coalescing.h"
#include "frugal/model/gpt.h"

using namespace frugal;
using namespace frugal::multilevel;
using frugal::testing::error_of;

namespace {

// A small GPT: head size 8, vocabulary 70 (padded to 128, so wte has padding rows).
ModelConfig model(int n_layer, int n_head, MlpKind mlp, bool tied, bool bias, int ffn_mult = 2) {
  ModelConfig c;
  c.vocab_size = 70;
  c.block_size = 8;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = 8 * n_head;
  c.ffn_mult = ffn_mult;
  c.mlp = mlp;
  c.tied_head = tied;
  c.bias = bias;
  c.init_std = 0.1f;
  return c;
}

bool is_vocab(const ParamInfo& e) { return e.name == "transformer.wte.weight" || e.name == "lm_head.weight"; }

// N(0, 1) in every parameter; the vocabulary padding rows and the alignment padding stay zero.
std::vector<float> random_params(const ModelConfig& c, uint64_t seed) {
  const ParamTable table = ParamTable::build(c);
  std::vector<float> p(table.total(), 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParamInfo& e : table.entries()) {
    const size_t n = is_vocab(e) ? size_t(c.vocab_size) * c.n_embd : e.numel;
    for (size_t i = 0; i < n; ++i) p[e.offset + i] = normal(rng);
  }
  return p;
}

// True when every float outside the real parameters (alignment padding, vocabulary padding rows)
// is exactly zero.
bool padding_is_zero(const ModelConfig& c, const std::vector<float>& p) {
  const ParamTable table = ParamTable::build(c);
  std::vector<bool> real(p.size(), false);
  for (const ParamInfo& e : table.entries()) {
    const size_t n = is_vocab(e) ? size_t(c.vocab_size) * c.n_embd : e.numel;
    std::fill(real.begin() + e.offset, real.begin() + e.offset + n, true);
  }
  for (size_t i = 0; i < p.size(); ++i)
    if (!real[i] && p[i] != 0.0f) return false;
  return true;
}

std::vector<float> nan_buffer(const ModelConfig& c) {
  return std::vector<float>(ParamTable::build(c).total(), std::numeric_limits<float>::quiet_NaN());
}

// ---- the fp64 reference: dense matrices ----

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> a;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), a(size_t(r * c), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return a[size_t(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return a[size_t(i * cols + j)]; }
};

Mat operator*(const Mat& x, const Mat& y) {
  Mat z(x.rows, y.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t k = 0; k < x.cols; ++k)
      for (int64_t j = 0; j < y.cols; ++j) z(i, j) += x(i, k) * y(k, j);
  return z;
}

Mat transpose(const Mat& x) {
  Mat t(x.cols, x.rows);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) t(j, i) = x(i, j);
  return t;
}

Mat rownorm(Mat x) {
  for (int64_t i = 0; i < x.rows; ++i) {
    double s = 0;
    for (int64_t j = 0; j < x.cols; ++j) s += x(i, j);
    for (int64_t j = 0; j < x.cols; ++j) x(i, j) /= s;
  }
  return x;
}

// The features an axis of a tensor indexes.
enum class Kind { None, Residual, Hidden, Qkv };

// S (n_small × n_large): S[s, j] = 1 when large feature j merges into small feature s (the matrix
// of ones; F = rownorm(S) averages). Features are n_head chunks (3 blocks of them for qkv).
Mat membership(const LevelMap& m, Kind kind, int64_t n_large) {
  if (kind == Kind::None) {
    Mat id(n_large, n_large);
    for (int64_t i = 0; i < n_large; ++i) id(i, i) = 1;
    return id;
  }
  const int64_t HS = m.large.head_size(), chunk = kind == Kind::Hidden ? HS * m.large.ffn_mult : HS;
  const int64_t blocks = kind == Kind::Qkv ? 3 : 1;
  const int64_t block_large = chunk * m.large.n_head, block_small = chunk * m.small.n_head;
  EXPECT_EQ(n_large, blocks * block_large);
  Mat s(blocks * block_small, n_large);
  for (int64_t b = 0; b < blocks; ++b)
    for (int h = 0; h < m.large.n_head; ++h)
      for (int64_t f = 0; f < chunk; ++f)
        s(b * block_small + m.head_group[h] * chunk + f, b * block_large + h * chunk + f) = 1;
  return s;
}

// An axis of a tensor: its features and whether coalescing sums (else averages) its groups.
struct RefAxis {
  Kind kind = Kind::None;
  bool summed = false;
};

// The method's rule for each tensor, by name (layer prefix removed): (rows, cols).
std::pair<RefAxis, RefAxis> rule(const std::string& name, const ModelConfig& c) {
  const RefAxis none{}, res_mean{Kind::Residual, false}, res_sum{Kind::Residual, true};
  static const std::map<std::string, std::pair<RefAxis, RefAxis>> block = {
      {"ln_1.weight", {res_mean, none}},
      {"ln_1.bias", {res_mean, none}},
      {"ln_2.weight", {res_mean, none}},
      {"ln_2.bias", {res_mean, none}},
      {"attn.c_attn.weight", {{Kind::Qkv, false}, res_sum}},
      {"attn.c_attn.bias", {{Kind::Qkv, false}, none}},
      {"attn.c_proj.weight", {res_mean, res_sum}},
      {"attn.c_proj.bias", {res_mean, none}},
      {"mlp.c_fc.weight", {{Kind::Hidden, false}, res_sum}},
      {"mlp.c_fc.bias", {{Kind::Hidden, false}, none}},
      {"mlp.c_gate.weight", {{Kind::Hidden, false}, res_sum}},
      {"mlp.c_gate.bias", {{Kind::Hidden, false}, none}},
      {"mlp.c_proj.weight", {res_mean, {Kind::Hidden, true}}},
      {"mlp.c_proj.bias", {res_mean, none}},
  };
  if (name == "transformer.wte.weight" || name == "transformer.wpe.weight") return {none, res_mean};
  if (name.starts_with("transformer.ln_f.")) return {c.tied_head ? res_sum : res_mean, none};
  if (name == "lm_head.weight") return {none, res_sum};
  const std::string suffix = name.substr(name.find('.', std::string("transformer.h.").size()) + 1);
  return block.at(suffix);
}

Mat tensor(const ParamInfo& e, const std::vector<float>& p) {
  Mat t(e.shape[0], e.shape.size() == 2 ? e.shape[1] : 1);
  for (size_t i = 0; i < e.numel; ++i) t.a[i] = p[e.offset + i];
  return t;
}

std::string layer_name(const std::string& name, int layer) {
  const size_t at = name.find('.', std::string("transformer.h.").size());
  return "transformer.h." + std::to_string(layer) + name.substr(at);
}

// R (L_small × L_large): R[i, j] = 1/|g_i| for the large layers j of small layer i.
Mat depth_matrix(const LevelMap& m) {
  Mat s(m.small.n_layer, m.large.n_layer);
  for (int j = 0; j < m.large.n_layer; ++j) s(m.layer_group[j], j) = 1;
  return rownorm(s);
}

// Calls f(small entry, large entry, R[i, j], D[j, i]) for every pair of tensors of small layer i and
// large layer j with R[i, j] != 0, and for the tensors outside the blocks (weights 1); D =
// rownorm(Rᵀ) de-coalesces the depth.
template <class F>
void for_each_pair(const LevelMap& m, F&& f) {
  const ParamTable small = ParamTable::build(m.small), large = ParamTable::build(m.large);
  const Mat R = depth_matrix(m), D = rownorm(transpose(R));
  for (const ParamInfo& s : small.entries()) {
    if (s.layer < 0 || s.layer == m.small.n_layer) {
      f(s, large.at(s.name), 1.0, 1.0);
      continue;
    }
    for (int j = 0; j < m.large.n_layer; ++j)
      if (R(s.layer, j) != 0) f(s, large.at(layer_name(s.name, j)), R(s.layer, j), D(j, s.layer));
  }
}

// Coalescing: small_i = Σ_j R[i,j] · L · W_j · Rt, L = F_out (averaged rows) or S_out (summed),
// Rt = F_inᵀ or S_inᵀ, on the small model's layout.
std::vector<double> reference_coalesce(const LevelMap& m, const std::vector<float>& large) {
  std::vector<double> out(ParamTable::build(m.small).total(), 0.0);
  for_each_pair(m, [&](const ParamInfo& s, const ParamInfo& l, double w, double) {
    const auto [rows, cols] = rule(l.name, m.large);
    const Mat Sr = membership(m, rows.kind, l.shape[0]);
    const Mat Sc = membership(m, cols.kind, l.shape.size() == 2 ? l.shape[1] : 1);
    const Mat L = rows.summed ? Sr : rownorm(Sr), Rt = transpose(cols.summed ? Sc : rownorm(Sc));
    const Mat y = L * tensor(l, large) * Rt;
    for (size_t i = 0; i < s.numel; ++i) out[s.offset + i] += w * y.a[i];
  });
  return out;
}

// De-coalescing: large_j = Σ_i D[j,i] · L · small_i · Rt with L = T_out = rownorm(F_outᵀ) = S_outᵀ
// (copies) for averaged rows, F_outᵀ (splits by k) for summed ones, and Rt = S_in or F_in.
std::vector<double> reference_decoalesce(const LevelMap& m, const std::vector<float>& small) {
  std::vector<double> out(ParamTable::build(m.large).total(), 0.0);
  for_each_pair(m, [&](const ParamInfo& s, const ParamInfo& l, double, double w) {
    const auto [rows, cols] = rule(l.name, m.large);
    const Mat Sr = membership(m, rows.kind, l.shape[0]);
    const Mat Sc = membership(m, cols.kind, l.shape.size() == 2 ? l.shape[1] : 1);
    const Mat L = transpose(rows.summed ? rownorm(Sr) : Sr), Rt = cols.summed ? rownorm(Sc) : Sc;
    const Mat y = L * tensor(s, small) * Rt;
    for (size_t i = 0; i < l.numel; ++i) out[l.offset + i] += w * y.a[i];
  });
  return out;
}

// max over tensors of max |got - want| / max |want| (the tensor's scale).
double max_rel_error(const ModelConfig& c, const std::vector<float>& got, const std::vector<double>& want) {
  const ParamTable table = ParamTable::build(c);
  double worst = 0;
  for (const ParamInfo& e : table.entries()) {
    double diff = 0, scale = 0;
    for (size_t i = e.offset; i < e.offset + e.numel; ++i) {
      diff = std::max(diff, std::fabs(got[i] - want[i]));
      scale = std::max(scale, std::fabs(want[i]));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

std::vector<double> to_double(const std::vector<float>& p) { return {p.begin(), p.end()}; }

// ---- configurations ----

struct Case {
  std::string name;
  ModelConfig large;
  CoalesceSpec spec;
};

std::vector<Case> cases() {
  using G = Grouping;
  const MlpKind gelu = MlpKind::Gelu, geglu = MlpKind::Geglu, swiglu = MlpKind::Swiglu;
  return {
      {"GeluTiedBias_W2D2", model(4, 4, gelu, true, true), {2, 2, G::Stride, G::Adjacent}},
      {"SwigluUntiedNoBias_W3_3to2Layers", model(3, 6, swiglu, false, false, 3),
       {3, 2, G::Adjacent, G::Adjacent}},
      {"GegluTiedNoBias_W2_5to3LayersStride", model(5, 6, geglu, true, false), {2, 2, G::Stride, G::Stride}},
      {"GeluUntiedBias_DepthOnly", model(4, 2, gelu, false, true, 1), {1, 2, G::Stride, G::Adjacent}},
      {"SwigluTiedBias_WidthOnlyW3", model(2, 6, swiglu, true, true), {3, 1, G::Stride, G::Adjacent}},
      {"GeluUntiedBias_W2_5to2Layers", model(5, 4, gelu, false, true), {2, 3, G::Adjacent, G::Adjacent}},
      {"GegluUntiedBias_W3AdjacentToOneHead", model(1, 3, geglu, false, true, 4),
       {3, 1, G::Adjacent, G::Adjacent}},
  };
}

class Coalescing : public ::testing::TestWithParam<Case> {};

TEST_P(Coalescing, CoalesceMatchesTheFp64Reference) {
  const LevelMap m = LevelMap::make(GetParam().large, GetParam().spec);
  const std::vector<float> large = random_params(m.large, 1);
  std::vector<float> small = nan_buffer(m.small);
  coalesce(m, large, small);
  const double err = max_rel_error(m.small, small, reference_coalesce(m, large));
  std::printf("[ metric ] %s coalesce max rel error vs fp64 %.2e\n", GetParam().name.c_str(), err);
  RecordProperty("max_rel_error", std::to_string(err));
  EXPECT_LT(err, 1e-6);
  EXPECT_TRUE(padding_is_zero(m.small, small));
}

TEST_P(Coalescing, DecoalesceMatchesTheFp64Reference) {
  const LevelMap m = LevelMap::make(GetParam().large, GetParam().spec);
  const std::vector<float> small = random_params(m.small, 2);
  std::vector<float> large = nan_buffer(m.large);
  decoalesce(m, small, large);
  const double err = max_rel_error(m.large, large, reference_decoalesce(m, small));
  std::printf("[ metric ] %s decoalesce max rel error vs fp64 %.2e\n", GetParam().name.c_str(), err);
  RecordProperty("max_rel_error", std::to_string(err));
  EXPECT_LT(err, 1e-6);
  EXPECT_TRUE(padding_is_zero(m.large, large));
}

TEST_P(Coalescing, CoalesceAfterDecoalesceIsTheIdentity) {
  const LevelMap m = LevelMap::make(GetParam().large, GetParam().spec);
  const std::vector<float> small = random_params(m.small, 3);
  std::vector<float> large = nan_buffer(m.large), back = nan_buffer(m.small);
  decoalesce(m, small, large);
  coalesce(m, large, back);
  double abs_err = 0;
  for (size_t i = 0; i < small.size(); ++i)
    abs_err = std::max(abs_err, double(std::fabs(back[i] - small[i])));
  const double rel_err = max_rel_error(m.small, back, to_double(small));
  std::printf("[ metric ] %s coalesce(decoalesce(x)) max abs error %.2e, max rel error %.2e\n",
              GetParam().name.c_str(), abs_err, rel_err);
  RecordProperty("max_rel_error", std::to_string(rel_err));
  EXPECT_LT(abs_err, 1e-5);  // values ~N(0, 1), up to ~4.5
  EXPECT_LT(rel_err, 1e-6);
  EXPECT_TRUE(padding_is_zero(m.small, back));
}

INSTANTIATE_TEST_SUITE_P(Configs, Coalescing, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(CoalescingMap, GroupsHeadsAndLayersByTheGrouping) {
  const ModelConfig large = model(5, 6, MlpKind::Gelu, true, true);
  const LevelMap stride = LevelMap::make(large, {2, 2, Grouping::Stride, Grouping::Stride});
  EXPECT_EQ(stride.head_group, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(stride.layer_group, (std::vector<int>{0, 1, 2, 0, 1}));
  const LevelMap adjacent = LevelMap::make(large, {2, 2, Grouping::Adjacent, Grouping::Adjacent});
  EXPECT_EQ(adjacent.head_group, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(adjacent.layer_group, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(LevelMap::make(model(3, 6, MlpKind::Gelu, true, true), {3, 2}).layer_group,
            (std::vector<int>{0, 0, 1}));

  ModelConfig want = large;
  want.n_layer = 3;
  want.n_head = 3;
  want.n_embd = 24;  // the head size stays 8
  EXPECT_EQ(adjacent.small, want);
  EXPECT_EQ(coalesced_config(large, {3, 5}).n_layer, 1);
  EXPECT_EQ(coalesced_config(large, {3, 5}).n_embd, 16);

  for (Grouping g : {Grouping::Stride, Grouping::Adjacent})
    EXPECT_EQ(parse_grouping(grouping_name(g), "k"), g);
}

// ---- function preservation ----

// The model variants whose function de-coalescing must keep: a decoder, and an encoder
// (model.objective = mlm: embedding LayerNorm, MLM head with its dense layer and LayerNorm before the
// tied decoder) with post-LN (BERT's) or pre-LN blocks.
enum class Variant { Decoder, EncoderPostLn, EncoderPreLn };

class CoalescingFunction : public ::testing::TestWithParam<std::tuple<bool, bool, MlpKind, Variant>> {};

// max |a - b| / max |b|
double logits_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

TEST_P(CoalescingFunction, WidthDecoalescingPreservesTheLogits) {
  const auto [tied, bias, mlp, variant] = GetParam();
  ModelConfig config = model(2, 4, mlp, tied, bias);
  if (variant != Variant::Decoder) {
    config.objective = ObjectiveKind::Mlm;
    config.norm = variant == Variant::EncoderPostLn ? NormPlacement::Post : NormPlacement::Pre;
  }
  const LevelMap m = LevelMap::make(config, {2, 1});
  GPT small(m.small), large(m.large);
  small.init_weights(11);
  // Non-trivial LayerNorms and biases, so that every map is exercised.
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const ParamInfo& e : small.table().entries()) {
    const bool gain = e.role == ParamRole::NormWeight;
    if (gain || e.role == ParamRole::NormBias || e.role == ParamRole::Bias)
      for (size_t i = 0; i < e.numel; ++i) small.params()[e.offset + i] = (gain ? 1.0f : 0.0f) + normal(rng);
  }
  decoalesce(m, {small.params(), small.num_floats()}, {large.params(), large.num_floats()});

  const int B = 2, T = m.large.block_size;
  std::vector<int32_t> tokens(size_t(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 37 + 5) % m.large.vocab_size);
  std::vector<float> want(tokens.size() * m.large.vocab_size), got(want.size());
  small.logits(tokens.data(), B, T, want.data());
  large.logits(tokens.data(), B, T, got.data());
  const double err = logits_rel_diff(got, want);
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::printf("[ metric ] %s: de-coalesced logits max rel diff %.2e\n", name.c_str(), err);
  RecordProperty("max_rel_error", std::to_string(err));
  EXPECT_LT(err, 1e-5);

  if (!tied) return;
  // The paper's mistake: the LayerNorm the tied head reads (ln_f; an encoder's lm_head.layer_norm)
  // copied like the others (not divided by k = 2).
  const std::string head_input = head_input_norm(m.large);
  for (const std::string& name : {head_input + ".weight", head_input + ".bias"}) {
    const ParamInfo* e = large.table().find(name);
    if (!e) continue;
    for (size_t i = 0; i < e->numel; ++i) large.params()[e->offset + i] *= 2.0f;
  }
  large.logits(tokens.data(), B, T, got.data());
  const double unscaled = logits_rel_diff(got, want);
  std::printf("[ metric ] %s: with %s unscaled, logits max rel diff %.2e\n", name.c_str(), head_input.c_str(),
              unscaled);
  EXPECT_GT(unscaled, 1e-2);
}

std::string function_case_name(const ::testing::TestParamInfo<CoalescingFunction::ParamType>& info) {
  const auto& [tied, bias, mlp, variant] = info.param;
  return std::string(variant == Variant::Decoder ? "" : variant == Variant::EncoderPostLn ? "PostLnEncoder"
                                                                                            : "PreLnEncoder") +
         (tied ? "Tied" : "Untied") + (bias ? "Bias" : "NoBias") + (mlp == MlpKind::Gelu ? "Gelu" : "Swiglu");
}

INSTANTIATE_TEST_SUITE_P(Models, CoalescingFunction,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(MlpKind::Gelu, MlpKind::Swiglu),
                                            ::testing::Values(Variant::Decoder)),
                         function_case_name);
// An encoder's head is tied (model.tied_head = false is refused).
INSTANTIATE_TEST_SUITE_P(Encoders, CoalescingFunction,
                         ::testing::Combine(::testing::Values(true), ::testing::Bool(),
                                            ::testing::Values(MlpKind::Gelu),
                                            ::testing::Values(Variant::EncoderPostLn, Variant::EncoderPreLn)),
                         function_case_name);

// ---- depth ----

// A large model whose layers equal, in each group, the group's first layer coalesces (depth only)
// to those layers, and de-coalesces back to itself.
TEST(CoalescingDepth, IdenticalLayersCoalesceExactly) {
  for (const CoalesceSpec spec : {CoalesceSpec{1, 2, Grouping::Stride, Grouping::Adjacent},
                                  CoalesceSpec{1, 3, Grouping::Stride, Grouping::Stride}}) {
    const LevelMap m = LevelMap::make(model(5, 2, MlpKind::Swiglu, false, true), spec);
    const ParamTable lt = ParamTable::build(m.large), st = ParamTable::build(m.small);
    std::vector<float> large = random_params(m.large, 4);
    std::vector<int> first(m.small.n_layer, -1);  // small layer -> first large layer of its group
    for (int j = 0; j < m.large.n_layer; ++j)
      if (first[m.layer_group[j]] < 0) first[m.layer_group[j]] = j;
    for (const ParamInfo& e : lt.entries()) {
      if (e.layer < 0 || e.layer == m.large.n_layer) continue;
      const ParamInfo& from = lt.at(layer_name(e.name, first[m.layer_group[e.layer]]));
      std::copy_n(large.begin() + from.offset, e.numel, large.begin() + e.offset);
    }

    std::vector<float> small = nan_buffer(m.small), back = nan_buffer(m.large);
    coalesce(m, large, small);
    double err = 0;
    for (const ParamInfo& e : st.entries()) {
      const bool block = e.layer >= 0 && e.layer < m.small.n_layer;
      const ParamInfo& want = block ? lt.at(layer_name(e.name, first[e.layer])) : lt.at(e.name);
      for (size_t i = 0; i < e.numel; ++i) {
        const float w = large[want.offset + i];
        err = std::max(err, std::fabs(small[e.offset + i] - w) / std::max(1.0, double(std::fabs(w))));
      }
    }
    decoalesce(m, small, back);
    const double back_err = max_rel_error(m.large, back, to_double(large));
    std::printf("[ metric ] depth factor %d: identical layers coalesced max rel error %.2e, "
                "de-coalesced %.2e\n", spec.depth_factor, err, back_err);
    EXPECT_LT(err, 2e-7);
    EXPECT_LT(back_err, 2e-7);
  }
}

// ---- errors and interpolation ----

TEST(CoalescingErrors, NameTheKey) {
  const ModelConfig large = model(4, 6, MlpKind::Gelu, true, true);
  std::string e = error_of([&] { LevelMap::make(large, {4, 2}); });
  EXPECT_NE(e.find("methods.multilevel.width_factor = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("model.n_head = 6"), std::string::npos) << e;
  e = error_of([&] { LevelMap::make(large, {0, 2}); });
  EXPECT_NE(e.find("methods.multilevel.width_factor = 0"), std::string::npos) << e;
  e = error_of([&] { LevelMap::make(large, {2, -1}); });
  EXPECT_NE(e.find("methods.multilevel.depth_factor = -1"), std::string::npos) << e;
  e = error_of([&] { LevelMap::make(large, {1, 1}); });
  EXPECT_NE(e.find("methods.multilevel.width_factor = 1"), std::string::npos) << e;
  EXPECT_NE(e.find("methods.multilevel.depth_factor = 1"), std::string::npos) << e;
  e = error_of([&] { parse_grouping("pairs", "methods.multilevel.width_grouping"); });
  EXPECT_NE(e.find("methods.multilevel.width_grouping = \"pairs\""), std::string::npos) << e;

  const LevelMap m = LevelMap::make(large, {2, 2});
  std::vector<float> big(ParamTable::build(m.large).total()), wrong(10);
  EXPECT_THROW(coalesce(m, big, wrong), Error);
  EXPECT_THROW(decoalesce(m, wrong, big), Error);
}

TEST(CoalescingInterpolate, MixesBeforeAndNow) {
  const std::vector<float> before = {1.0f, 2.0f, -4.0f};
  const std::vector<float> now = {3.0f, 6.0f, 8.0f};
  for (const auto& [alpha, want] : std::vector<std::pair<float, std::vector<float>>>{
           {0.0f, before}, {1.0f, now}, {0.5f, {2.0f, 4.0f, 2.0f}}}) {
    std::vector<float> x = now;
    interpolate(alpha, before, x);
    EXPECT_EQ(x, want) << "alpha " << alpha;
  }
  std::vector<float> shorter(2);
  EXPECT_THROW(interpolate(0.5f, before, shorter), Error);
}

}  // namespace
