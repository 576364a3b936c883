// ParamTable construction and ModelConfig validation.
#include "frugal/model/param_table.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"

namespace frugal {

const char* mlp_kind_name(MlpKind kind) {
  switch (kind) {
    case MlpKind::Gelu: return "gelu";
    case MlpKind::Geglu: return "geglu";
    case MlpKind::Swiglu: return "swiglu";
  }
  return "?";
}

MlpKind parse_mlp_kind(const std::string& name) {
  if (name == "gelu") return MlpKind::Gelu;
  if (name == "geglu") return MlpKind::Geglu;
  if (name == "swiglu") return MlpKind::Swiglu;
  fail("model.mlp = \"{}\" is not a known MLP; use \"gelu\", \"geglu\" or \"swiglu\"", name);
}

void ModelConfig::validate() const {
  FRUGAL_CHECK(vocab_size >= 2, "model.vocab_size = {} is too small; it must be at least 2", vocab_size);
  FRUGAL_CHECK(block_size >= 1, "model.block_size = {} must be at least 1", block_size);
  FRUGAL_CHECK(n_layer >= 1, "model.n_layer = {} must be at least 1", n_layer);
  FRUGAL_CHECK(n_head >= 1, "model.n_head = {} must be at least 1", n_head);
  FRUGAL_CHECK(n_embd >= 1 && n_embd % n_head == 0,
               "model.n_embd = {} must be a positive multiple of model.n_head = {}", n_embd, n_head);
  FRUGAL_CHECK(head_size() % 8 == 0 && head_size() <= 256,
               "head size n_embd/n_head = {} must be a multiple of 8 and at most 256", head_size());
  FRUGAL_CHECK(n_embd % 8 == 0, "model.n_embd = {} must be a multiple of 8", n_embd);
  FRUGAL_CHECK(ffn_mult >= 1, "model.ffn_mult = {} must be at least 1", ffn_mult);
  FRUGAL_CHECK(dropout >= 0.0f && dropout < 1.0f, "model.dropout = {} must be in [0, 1)", dropout);
  FRUGAL_CHECK(layernorm_eps > 0.0f, "model.layernorm_eps = {} must be positive", layernorm_eps);
  FRUGAL_CHECK(init_std > 0.0f, "model.init_std = {} must be positive", init_std);
}

namespace {

class Builder {
 public:
  void add(std::string name, std::vector<int64_t> shape, ParamRole role, int layer) {
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    constexpr size_t align_floats = kAlign / sizeof(float);
    ParamInfo info{std::move(name), std::move(shape), total, numel, role, layer};
    total += (numel + align_floats - 1) / align_floats * align_floats;
    entries.push_back(std::move(info));
  }
  std::vector<ParamInfo> entries;
  size_t total = 0;
};

}  // namespace

void BlockRange::validate(const ModelConfig& c) const {
  FRUGAL_CHECK(0 <= begin && begin <= end && end <= c.n_layer,
               "internal: block range [{}, {}) is not within the model's {} blocks", begin, end, c.n_layer);
  FRUGAL_CHECK(!embeddings || begin == 0, "internal: a range with the embeddings must start at block 0");
  FRUGAL_CHECK(!head || end == c.n_layer, "internal: a range with the head must end at the last block");
  FRUGAL_CHECK(embeddings || head || begin < end, "internal: block range [{}, {}) holds nothing", begin, end);
}

ParamTable ParamTable::build(const ModelConfig& c) { return build(c, BlockRange::whole(c)); }

ParamTable ParamTable::build(const ModelConfig& c, const BlockRange& range) {
  c.validate();
  range.validate(c);
  const int64_t C = c.n_embd, H = c.ffn_hidden(), Vp = c.padded_vocab();
  Builder b;
  // A tied head reads the token embedding: a last stage without the embeddings holds a copy
  // (its gradient is the head's part, for the parallel strategy to add to the first stage's).
  if (range.embeddings || (range.head && c.tied_head))
    b.add("transformer.wte.weight", {Vp, C}, ParamRole::Embedding, -1);
  if (range.embeddings) b.add("transformer.wpe.weight", {c.block_size, C}, ParamRole::Embedding, -1);
  for (int l = range.begin; l < range.end; ++l) {
    const std::string p = fmt::format("transformer.h.{}.", l);
    auto linear = [&](const std::string& name, int64_t oc, int64_t ic) {
      b.add(p + name + ".weight", {oc, ic}, ParamRole::Weight, l);
      if (c.bias) b.add(p + name + ".bias", {oc}, ParamRole::Bias, l);
    };
    auto norm = [&](const std::string& name) {
      b.add(p + name + ".weight", {C}, ParamRole::NormWeight, l);
      if (c.bias) b.add(p + name + ".bias", {C}, ParamRole::NormBias, l);
    };
    norm("ln_1");
    linear("attn.c_attn", 3 * C, C);
    linear("attn.c_proj", C, C);
    norm("ln_2");
    linear("mlp.c_fc", H, C);
    if (c.gated()) linear("mlp.c_gate", H, C);
    linear("mlp.c_proj", C, H);
  }
  if (range.head) {
    b.add("transformer.ln_f.weight", {C}, ParamRole::NormWeight, c.n_layer);
    if (c.bias) b.add("transformer.ln_f.bias", {C}, ParamRole::NormBias, c.n_layer);
    if (!c.tied_head) b.add("lm_head.weight", {Vp, C}, ParamRole::Weight, c.n_layer);
  }
  ParamTable t;
  t.entries_ = std::move(b.entries);
  t.total_ = b.total;
  return t;
}

const ParamInfo* ParamTable::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const ParamInfo& ParamTable::at(std::string_view name) const {
  const ParamInfo* e = find(name);
  FRUGAL_CHECK(e, "internal: no parameter named '{}' in this model", name);
  return *e;
}

size_t ParamTable::num_parameters(const ModelConfig& c) const {
  size_t n = 0;
  for (const auto& e : entries_) {
    bool vocab_rows = e.name == "transformer.wte.weight" || e.name == "lm_head.weight";
    n += vocab_rows ? static_cast<size_t>(c.vocab_size) * c.n_embd : e.numel;
  }
  return n;
}

std::pair<size_t, size_t> ParamTable::layer_range(int layer) const {
  size_t begin = total_, end = 0;
  for (const auto& e : entries_) {
    if (e.layer != layer) continue;
    begin = std::min(begin, e.offset);
    end = std::max(end, e.offset + e.numel);
  }
  if (begin > end) return {0, 0};
  return {begin, end};
}

}  // namespace frugal
