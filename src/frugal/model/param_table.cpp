// ParamTable construction (from the ModelSpec) and ModelConfig validation.
#include "frugal/model/param_table.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/kernels/ops.h"

namespace frugal {

const char* mlp_kind_name(MlpKind kind) {
  switch (kind) {
    case MlpKind::Gelu: return "gelu";
    case MlpKind::Geglu: return "geglu";
    case MlpKind::Swiglu: return "swiglu";
    case MlpKind::Relu2: return "relu2";
  }
  return "?";
}

MlpKind parse_mlp_kind(const std::string& name) {
  if (name == "gelu") return MlpKind::Gelu;
  if (name == "geglu") return MlpKind::Geglu;
  if (name == "swiglu") return MlpKind::Swiglu;
  if (name == "relu2") return MlpKind::Relu2;
  fail("model.mlp = \"{}\" is not a known MLP; use \"gelu\", \"geglu\", \"swiglu\" or \"relu2\"", name);
}

const char* norm_placement_name(NormPlacement norm) { return norm == NormPlacement::Pre ? "pre" : "post"; }

NormPlacement parse_norm_placement(const std::string& name) {
  if (name == "pre") return NormPlacement::Pre;
  if (name == "post") return NormPlacement::Post;
  fail("model.norm = \"{}\" is not a LayerNorm placement; use \"pre\" or \"post\"", name);
}

const char* position_kind_name(PositionKind kind) { return kind == PositionKind::Learned ? "learned" : "rotary"; }

PositionKind parse_position_kind(const std::string& name) {
  if (name == "learned") return PositionKind::Learned;
  if (name == "rotary") return PositionKind::Rotary;
  fail("model.position = \"{}\" is not a position encoding; use \"learned\" or \"rotary\"", name);
}

const char* objective_kind_name(ObjectiveKind kind) { return kind == ObjectiveKind::Causal ? "causal" : "mlm"; }

ObjectiveKind parse_objective_kind(const std::string& name) {
  if (name == "causal") return ObjectiveKind::Causal;
  if (name == "mlm") return ObjectiveKind::Mlm;
  fail("model.objective = \"{}\" is not a training objective; use \"causal\" (next token) or \"mlm\" "
       "(masked tokens, an encoder)", name);
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
  FRUGAL_CHECK(rope_base > 1.0f, "model.rope_base = {} must be above 1", rope_base);
  FRUGAL_CHECK(logit_softcap >= 0.0f, "model.logit_softcap = {} must be 0 (off) or positive", logit_softcap);
  FRUGAL_CHECK(!encoder() || tied_head, "model.objective = \"mlm\" ties the masked-LM decoder to the token "
               "embedding (BERT, RoBERTa); set model.tied_head = true");
  if (moe.experts == 0) return;
  FRUGAL_CHECK(moe.experts >= 2 && moe.experts <= kernels::kMaxExperts, "model.moe.experts = {} must be 0 "
               "(no mixture of experts) or in [2, {}]", moe.experts, kernels::kMaxExperts);
  FRUGAL_CHECK(moe.top_k >= 2 && moe.top_k <= moe.experts, "model.moe.top_k = {} must be in [2, "
               "model.moe.experts = {}] (with one expert per token the renormalised combine weight is "
               "always 1 and the router would learn nothing)", moe.top_k, moe.experts);
  FRUGAL_CHECK(moe.every >= 1 && moe.every <= n_layer, "model.moe.every = {} must be in [1, model.n_layer "
               "= {}]: the mixture of experts replaces the MLP of every n-th block", moe.every, n_layer);
  FRUGAL_CHECK(moe.hidden >= 0, "model.moe.hidden = {} must be 0 (the dense MLP's width) or positive",
               moe.hidden);
  FRUGAL_CHECK(moe.aux_loss_coef >= 0 && moe.z_loss_coef >= 0 && moe.bias_rate >= 0,
               "model.moe.aux_loss_coef, z_loss_coef and bias_rate must not be negative");
}

void BlockRange::validate(const ModelConfig& c) const {
  FRUGAL_CHECK(0 <= begin && begin <= end && end <= c.n_layer,
               "internal: block range [{}, {}) is not within the model's {} blocks", begin, end, c.n_layer);
  FRUGAL_CHECK(!embeddings || begin == 0, "internal: a range with the embeddings must start at block 0");
  FRUGAL_CHECK(!head || end == c.n_layer, "internal: a range with the head must end at the last block");
  FRUGAL_CHECK(embeddings || head || begin < end, "internal: block range [{}, {}) holds nothing", begin, end);
}

ParamTable ParamTable::build(const ModelConfig& c) { return build(c, BlockRange::whole(c)); }

ParamTable ParamTable::build(const ModelConfig& c, const BlockRange& range) { return build(c, range, {}); }

ParamTable ParamTable::build(const ModelConfig& c, const BlockRange& range, const ShardCoord& shard) {
  const ModelSpec spec = ModelSpec::build(c);
  range.validate(c);
  // (A last stage without the embeddings holds a tied head's copy of wte: its gradient is the
  // head's part, for the parallel strategy to add to the first stage's.)
  constexpr size_t align_floats = kAlign / sizeof(float);
  const auto aligned = [](size_t numel) { return (numel + align_floats - 1) / align_floats * align_floats; };
  ParamTable table;
  table.shard_ = shard;
  size_t whole = 0;  // the whole model's buffer in one process
  for (const TensorSpec& t : spec.tensors()) {
    const size_t global_offset = whole;
    whole += aligned(t.global_numel());
    if (!range.holds(t, c)) continue;
    ParamInfo e;
    static_cast<TensorSpec&>(e) = t;
    e.local = t.local_shape(shard);
    e.numel = 1;
    for (int64_t d : e.local) e.numel *= static_cast<size_t>(d);
    e.offset = table.total_;
    e.global_offset = global_offset;
    table.total_ += aligned(e.numel);
    if (t.layer == -1 && !range.embeddings) table.owned_begin_ = table.total_;  // the tied head's copy
    table.entries_.push_back(std::move(e));
  }
  return table;
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

size_t ParamTable::global_offset(size_t offset) const {
  for (const auto& e : entries_)
    if (offset >= e.offset && offset < e.offset + e.numel) return e.global_offset + (offset - e.offset);
  fail("internal: offset {} of the parameter buffer lies in no tensor", offset);
}

size_t ParamTable::offset_of(std::string_view name) const {
  const ParamInfo* e = find(name);
  return e ? e->offset : kAbsent;
}

size_t ParamInfo::used_numel(const ShardCoord& shard) const {
  if (used_rows < 0) return numel;
  const int64_t rows = local[0];
  const bool split_rows = placement.kind == Placement::Kind::Sharded && placement.axis == 0;
  const int64_t first = split_rows ? rows * shard.rank : 0;
  return numel / rows * std::clamp<int64_t>(used_rows - first, 0, rows);
}

size_t ParamTable::num_parameters() const {
  size_t n = 0;
  for (const auto& e : entries_)
    if (e.role != ParamRole::Buffer) n += e.used_numel(shard_);
  return n;
}

size_t ParamTable::num_active_parameters(int top_k) const {
  size_t n = 0;
  for (const auto& e : entries_)
    if (e.role != ParamRole::Buffer)
      n += e.experts > 0 ? e.used_numel(shard_) / size_t(e.experts) * size_t(top_k) : e.used_numel(shard_);
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
