// GPT forward/backward over the flat buffers; see gpt.h.
#include "frugal/model/gpt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/ops.h"
#include "frugal/model/formats/dense.h"

namespace frugal {

namespace k = kernels;

std::string MemoryPlan::describe(size_t optimizer_state_bytes) const {
  auto mib = [](double b) { return b / (1024.0 * 1024.0); };
  return fmt::format(
      "memory plan: parameters {:.1f} MiB, gradients {:.1f} MiB, optimizer state {:.1f} MiB, "
      "activations {:.1f} MiB, backward scratch {:.1f} MiB, total {:.1f} MiB",
      mib(parameters), mib(gradients), mib(optimizer_state_bytes), mib(activations), mib(scratch),
      mib(double(parameters) + gradients + optimizer_state_bytes + activations + scratch));
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute) {
  return estimate_memory(c, B, T, recompute, BlockRange::whole(c));
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute,
                                const BlockRange& range) {
  return estimate_memory(c, B, T, recompute, range, range, 1);
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute,
                                const BlockRange& range, const BlockRange& stage, int slots) {
  double recomputed_blocks = 0;
  for (int l = stage.begin; l < stage.end; ++l) recomputed_blocks += l < int(recompute.size()) && recompute[l];
  // In floats, each tensor rounded up to the alignment as ParamTable::build and plan() lay them
  // out, in double: absurd sizes give huge numbers instead of overflowing.
  constexpr double A = kAlign / sizeof(float);
  auto tensor = [](double floats) { return std::ceil(floats / A) * A; };
  const double N = double(B) * T, C = c.n_embd, H = double(c.ffn_mult) * c.n_embd,
               L = range.end - range.begin, NH = c.n_head, biases = c.bias ? 1 : 0,
               gates = c.gated() ? 1 : 0, embeddings = range.embeddings ? 1 : 0, head = range.head ? 1 : 0,
               stage_blocks = stage.end - stage.begin, stage_head = stage.head ? 1 : 0;
  const double vocab_rows = tensor(std::ceil(c.vocab_size / 64.0) * 64 * C);  // padded_vocab()
  auto linear = [&](double oc, double ic) { return tensor(oc * ic) + biases * tensor(oc); };
  const double norm = tensor(C) + biases * tensor(C);
  const double block =
      2 * norm + linear(3 * C, C) + linear(C, C) + (1 + gates) * linear(H, C) + linear(C, H);
  // as ParamTable::build(c, range): wte (also a tied head's copy), wpe, the blocks, ln_f, lm_head
  const double wte = range.embeddings || (range.head && c.tied_head) ? vocab_rows : 0;
  const double parameters = wte + embeddings * tensor(double(c.block_size) * C) + L * block +
                            head * (norm + (c.tied_head ? 0 : vocab_rows));
  // ln1, ln2 (each with mean and rstd), qkv, att, lse, res_mid, fc, gate, act
  const double internals = 2 * (tensor(N * C) + 2 * tensor(N)) + tensor(3 * N * C) + tensor(N * C) +
                           tensor(NH * N) + tensor(N * C) + (2 + gates) * tensor(N * H);
  // per slot: the stage's input, each block's internals (unless recomputed) and output; with the
  // head ln_f with mean and rstd, the losses and d loss / d ln_f's output
  const double slot = tensor(N * C) + (stage_blocks - recomputed_blocks) * internals +
                      stage_blocks * tensor(N * C) + stage_head * (2 * tensor(N * C) + 3 * tensor(N));
  const double activations = double(slots) * slot;
  // the recomputed blocks' shared internals; dres, dln, dqkv, datt, dfc, dgate, dact, branch
  const double scratch = (recomputed_blocks > 0 ? internals : 0) + 2 * tensor(N * C) +
                         tensor(3 * N * C) + tensor(N * C) + (2 + gates) * tensor(N * H) + tensor(N * C);
  auto bytes = [](double floats) {
    const double b = floats * sizeof(float);
    return b < 0x1p63 ? static_cast<size_t>(b) : size_t{1} << 63;
  };
  return {bytes(parameters), bytes(parameters), bytes(activations), bytes(scratch)};
}

GPT::GPT(const ModelConfig& config) : GPT(config, BlockRange::whole(config)) {}

GPT::GPT(const ModelConfig& config, const BlockRange& range)
    : config_(config), range_(range), table_(ParamTable::build(config, range)), stage_(range) {
  params_.resize(table_.total());
  grads_.resize(table_.total());
  auto off = [&](const std::string& name) {
    const ParamInfo* e = table_.find(name);
    return e ? e->offset : kAbsent;
  };
  for (int l = 0; l < config_.n_layer; ++l) {  // blocks outside the range: every offset kAbsent
    const std::string p = fmt::format("transformer.h.{}.", l);
    blocks_.push_back({off(p + "ln_1.weight"), off(p + "ln_1.bias"), off(p + "attn.c_attn.weight"),
                       off(p + "attn.c_attn.bias"), off(p + "attn.c_proj.weight"),
                       off(p + "attn.c_proj.bias"), off(p + "ln_2.weight"), off(p + "ln_2.bias"),
                       off(p + "mlp.c_fc.weight"), off(p + "mlp.c_fc.bias"),
                       off(p + "mlp.c_gate.weight"), off(p + "mlp.c_gate.bias"),
                       off(p + "mlp.c_proj.weight"), off(p + "mlp.c_proj.bias")});
  }
  dense_ = std::make_shared<DenseFormat>();
  std::array<std::shared_ptr<LinearFormat>, kLinears> dense_block;
  dense_block.fill(dense_);
  formats_.assign(config_.n_layer, dense_block);
  attention_patterns_.resize(config_.n_layer);
  format_changed_at_.assign(config_.n_layer, 0);
  wte_ = off("transformer.wte.weight");
  wpe_ = off("transformer.wpe.weight");
  lnf_w_ = off("transformer.ln_f.weight");
  lnf_b_ = off("transformer.ln_f.bias");
  plan_.parameters = plan_.gradients = table_.total() * sizeof(float);
}

void GPT::init_weights(uint64_t seed) {
  const float residual_std = config_.init_std / std::sqrt(2.0f * config_.n_layer);
  for (const ParamInfo& e : table_.entries()) {
    float* p = params_.data() + e.offset;
    switch (e.role) {
      case ParamRole::Bias:
      case ParamRole::NormBias: std::fill(p, p + e.numel, 0.0f); continue;
      case ParamRole::NormWeight: std::fill(p, p + e.numel, 1.0f); continue;
      default: break;
    }
    const bool residual = e.name.ends_with("c_proj.weight");
    const float std = residual ? residual_std : config_.init_std;
    // Real rows only: vocabulary padding rows stay zero.
    size_t n = e.numel;
    if (e.role == ParamRole::Embedding && e.name.ends_with("wte.weight")) n = size_t(config_.vocab_size) * config_.n_embd;
    if (e.name == "lm_head.weight") n = size_t(config_.vocab_size) * config_.n_embd;
    uint64_t key = mix64(seed);
    for (char ch : e.name) key = mix64(key ^ static_cast<uint8_t>(ch));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      // Box-Muller from two counter-based uniforms: any thread count gives the same values.
      const double u1 = std::max(1e-12, static_cast<double>(uniform_at(key, 2 * i)));
      const double u2 = uniform_at(key, 2 * i + 1);
      p[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    std::fill(p + n, p + e.numel, 0.0f);
  }
}

void GPT::plan(int B, int T, std::vector<bool> recompute) {
  plan(B, T, std::move(recompute), range_, 1);
}

void GPT::plan(int B, int T, std::vector<bool> recompute, const BlockRange& stage, int slots) {
  FRUGAL_CHECK(B >= 1, "batch size {} must be at least 1", B);
  FRUGAL_CHECK(T >= 1 && T <= config_.block_size,
               "sequence length {} must be in [1, model.block_size = {}]", T, config_.block_size);
  FRUGAL_CHECK(range_.begin <= stage.begin && stage.begin < stage.end && stage.end <= range_.end,
               "internal: stage [{}, {}) is not a non-empty sub-range of the model's blocks [{}, {})",
               stage.begin, stage.end, range_.begin, range_.end);
  FRUGAL_CHECK(!stage.embeddings || (range_.embeddings && stage.begin == range_.begin),
               "internal: a stage with the embeddings must start the range, which must hold them");
  FRUGAL_CHECK(!stage.head || (range_.head && stage.end == range_.end),
               "internal: a stage with the head must end the range, which must hold it");
  FRUGAL_CHECK(slots >= 1, "internal: {} activation slots; at least 1 is needed", slots);
  recompute.resize(config_.n_layer, false);
  B_ = B;
  T_ = T;
  stage_ = stage;
  recompute_ = std::move(recompute);
  const MemoryPlan planned = estimate_memory(config_, B, T, recompute_, range_, stage_, slots);
  const size_t N = size_t(B) * T, C = config_.n_embd, H = config_.ffn_hidden(),
               NH = config_.n_head;
  const bool gated = config_.gated();
  constexpr size_t A = kAlign / sizeof(float);
  auto round = [](size_t n) { return (n + A - 1) / A * A; };

  // Hands out the arena in order, counting activations and backward scratch apart.
  arena_.resize((planned.activations + planned.scratch) / sizeof(float));
  size_t activations = 0, scratch = 0, cursor = 0;
  auto take = [&](size_t n, size_t& counter) -> float* {
    counter += round(n);
    float* p = arena_.data() + cursor;
    cursor += round(n);
    return p;
  };
  auto internals = [&](BlockActs& a, size_t& counter) {
    a.ln1 = take(N * C, counter);
    a.ln1_mean = take(N, counter);
    a.ln1_rstd = take(N, counter);
    a.qkv = take(3 * N * C, counter);
    a.att = take(N * C, counter);
    a.lse = take(NH * N, counter);
    a.res_mid = take(N * C, counter);
    a.ln2 = take(N * C, counter);
    a.ln2_mean = take(N, counter);
    a.ln2_rstd = take(N, counter);
    a.fc = take(N * H, counter);
    a.gate = gated ? take(N * H, counter) : nullptr;
    a.act = take(N * H, counter);
  };
  // One shared set of internals for the recomputed blocks, rebuilt per block during backward.
  BlockActs shared{};
  if (std::find(recompute_.begin() + stage_.begin, recompute_.begin() + stage_.end, true) !=
      recompute_.begin() + stage_.end)
    internals(shared, scratch);
  slots_.assign(slots, Slot{});
  for (Slot& s : slots_) {
    s.input = take(N * C, activations);
    s.acts.assign(config_.n_layer, BlockActs{});
    for (int l = stage_.begin; l < stage_.end; ++l) {
      if (recompute_[l]) {
        s.acts[l] = shared;
      } else {
        internals(s.acts[l], activations);
      }
      s.acts[l].res_out = take(N * C, activations);
    }
    if (stage_.head) {
      s.lnf = take(N * C, activations);
      s.lnf_mean = take(N, activations);
      s.lnf_rstd = take(N, activations);
      s.losses = take(N, activations);
      s.dlnf = take(N * C, activations);
    }
    s.tokens.assign(N, 0);
    s.targets.assign(N, -1);
  }
  slot_ = 0;
  dres_ = take(N * C, scratch);
  dln_ = take(N * C, scratch);
  dqkv_ = take(3 * N * C, scratch);
  datt_ = take(N * C, scratch);
  dfc_ = take(N * H, scratch);
  dgate_ = gated ? take(N * H, scratch) : nullptr;
  dact_ = take(N * H, scratch);
  branch_ = take(N * C, scratch);
  FRUGAL_CHECK(activations * sizeof(float) == planned.activations &&
                   scratch * sizeof(float) == planned.scratch &&
                   table_.total() * sizeof(float) == planned.parameters,
               "internal: the model's layout ({} + {} activation and scratch floats, {} parameters) "
               "differs from GPT::estimate_memory's; make them agree", activations, scratch,
               table_.total());
  plan_ = planned;
}

void GPT::use_slot(int s) {
  FRUGAL_CHECK(s >= 0 && s < slots(), "internal: activation slot {} of {}", s, slots());
  slot_ = s;
}

bool GPT::planned_whole(int B, int T) const {
  return B_ == B && T_ == T && stage_ == range_ && slots() == 1;
}

void GPT::set_frozen_prefix(int k) {
  FRUGAL_CHECK(k >= 0 && k <= config_.n_layer, "frozen prefix {} must be in [0, n_layer = {}]", k,
               config_.n_layer);
  frozen_ = k;
}

size_t GPT::trainable_begin() const {
  if (frozen_ == 0) return 0;
  // The first trainable layer group of the range: a block at or above the frozen prefix, else ln_f.
  const int first = std::max(frozen_, range_.begin);
  if (first < range_.end) return table_.layer_range(first).first;
  return range_.head ? table_.layer_range(config_.n_layer).first : table_.total();
}

std::pair<size_t, size_t> GPT::token_embedding_range() const {
  return {wte_, wte_ + table_.at("transformer.wte.weight").numel};
}

size_t GPT::head_offset() const {
  const ParamInfo* head = table_.find("lm_head.weight");
  return head ? head->offset : table_.at("transformer.wte.weight").offset;
}

namespace {
// (weight, bias) offsets of one block linear
std::pair<size_t, size_t> linear_offsets(const auto& o, GPT::Linear which) {
  switch (which) {
    case GPT::Linear::Qkv: return {o.qkv_w, o.qkv_b};
    case GPT::Linear::Proj: return {o.proj_w, o.proj_b};
    case GPT::Linear::Fc: return {o.fc_w, o.fc_b};
    case GPT::Linear::Gate: return {o.gate_w, o.gate_b};
    case GPT::Linear::FcProj: return {o.fcproj_w, o.fcproj_b};
  }
  return {GPT::kAbsent, GPT::kAbsent};
}
}  // namespace

std::pair<int, int> GPT::linear_shape(Linear which) const {
  const int C = config_.n_embd, H = config_.ffn_hidden();
  switch (which) {
    case Linear::Qkv: return {3 * C, C};
    case Linear::Proj: return {C, C};
    case Linear::Fc:
    case Linear::Gate: return {H, C};
    case Linear::FcProj: return {C, H};
  }
  return {0, 0};
}

size_t GPT::linear_weight_offset(int layer, Linear which) const {
  return linear_offsets(blocks_.at(layer), which).first;
}

void GPT::set_linear_format(int layer, Linear which, std::shared_ptr<LinearFormat> format) {
  FRUGAL_CHECK(layer >= 0 && layer < config_.n_layer, "internal: no block {}", layer);
  FRUGAL_CHECK(linear_weight_offset(layer, which) != kAbsent, "internal: block {} has no such linear", layer);
  if (!format) format = dense_;
  std::shared_ptr<LinearFormat>& slot = formats_[layer][static_cast<int>(which)];
  if (slot != format) format_changed_at_[layer] = ++format_changes_;
  slot = std::move(format);
  const auto [oc, ic] = linear_shape(which);
  slot->refresh(params_.data() + linear_weight_offset(layer, which), oc, ic);
}

LinearFormat& GPT::linear_format(int layer, Linear which) const {
  return *formats_.at(layer)[static_cast<int>(which)];
}

void GPT::set_attention_pattern(int layer, const kernels::AttentionPattern& pattern) {
  FRUGAL_CHECK(layer >= 0 && layer < config_.n_layer, "internal: no block {}", layer);
  if (attention_patterns_[layer] != pattern) format_changed_at_[layer] = ++format_changes_;
  attention_patterns_[layer] = pattern;
}

const kernels::AttentionPattern& GPT::attention_pattern(int layer) const {
  return attention_patterns_.at(layer);
}

uint64_t GPT::prefix_format_version(int blocks) const {
  uint64_t version = 0;
  for (int l = range_.begin; l < std::min(blocks, range_.end); ++l) version = std::max(version, format_changed_at_[l]);
  return version;
}

void GPT::for_each_linear(const std::function<void(LinearFormat&, float*, int, int)>& f) {
  for (int l = range_.begin; l < range_.end; ++l)
    for (int i = 0; i < kLinears; ++i)
      if (linear_weight_offset(l, static_cast<Linear>(i)) != kAbsent) {
        const auto [oc, ic] = linear_shape(static_cast<Linear>(i));
        f(*formats_[l][i], params_.data() + linear_weight_offset(l, static_cast<Linear>(i)), oc, ic);
      }
}

void GPT::refresh_formats() {
  for_each_linear([](LinearFormat& format, float* weight, int oc, int ic) { format.refresh(weight, oc, ic); });
}

void GPT::write_effective_weights() {
  for_each_linear([](LinearFormat& format, float* weight, int oc, int ic) {
    format.write_effective_weight(weight, oc, ic);
    format.refresh(weight, oc, ic);
  });
}

void GPT::linear_forward(int l, Linear which, float* out, const float* inp, int N) const {
  const auto [w, b] = linear_offsets(blocks_[l], which);
  const auto [OC, C] = linear_shape(which);
  formats_[l][static_cast<int>(which)]->forward(out, inp, P(w), P(b), N, C, OC);
}

void GPT::linear_backward(int l, Linear which, float* dinp, const float* dout, const float* inp,
                          int N, bool accumulate_dinp) {
  const auto [w, b] = linear_offsets(blocks_[l], which);
  const auto [OC, C] = linear_shape(which);
  float* dw = G(w, true);
  float* db = G(b, true);
  formats_[l][static_cast<int>(which)]->backward(dinp, dw, db, dout, inp, P(w), N, C, OC,
                                                  accumulate_dinp);
}

namespace {
uint64_t site_key(uint64_t step_key, int layer, int site) {
  return mix64(step_key ^ mix64(static_cast<uint64_t>(layer) * 2 + site + 1));
}
}  // namespace

bool GPT::block_forward_reentrant(int l) const {
  for (const auto& format : formats_[l])
    if (format && !format->reentrant_forward()) return false;
  return true;
}

void GPT::block_forward(int l, uint64_t dropout_key, int b0, int nb) {
  const BlockOffsets& o = blocks_[l];
  const int B = nb, T = T_, C = config_.n_embd, H = config_.ffn_hidden(), N = B * T;
  // The samples' rows of every (B_,T,width) activation; lse is (B_,NH,T).
  const size_t row0 = size_t(b0) * T;
  const auto rows = [row0](float* t, int width) { return t ? t + row0 * width : nullptr; };
  const BlockActs& all = cur().acts[l];
  const BlockActs a{rows(all.ln1, C),     rows(all.ln1_mean, 1), rows(all.ln1_rstd, 1), rows(all.qkv, 3 * C),
                    rows(all.att, C),     rows(all.lse, config_.n_head), rows(all.res_mid, C), rows(all.ln2, C),
                    rows(all.ln2_mean, 1), rows(all.ln2_rstd, 1), rows(all.fc, H), rows(all.gate, H),
                    rows(all.act, H),     rows(all.res_out, C)};
  float* branch = rows(branch_, C);
  const float* x = block_input(l) + row0 * C;
  const float p = cur().dropout_p;
  const size_t first = row0 * C;  // of the dropout masks
  k::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(o.ln1_w), P(o.ln1_b), N, C, config_.layernorm_eps);
  linear_forward(l, Linear::Qkv, a.qkv, a.ln1, N);
  k::attention_forward(a.att, a.lse, a.qkv, B, T, C, config_.n_head, attention_patterns_[l]);
  linear_forward(l, Linear::Proj, branch, a.att, N);
  k::dropout_apply(branch, size_t(N) * C, p, site_key(dropout_key, l, 0), first);
  k::residual_forward(a.res_mid, x, branch, size_t(N) * C);
  k::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, P(o.ln2_w), P(o.ln2_b), N, C, config_.layernorm_eps);
  linear_forward(l, Linear::Fc, a.fc, a.ln2, N);
  if (config_.gated()) {
    linear_forward(l, Linear::Gate, a.gate, a.ln2, N);
    k::gated_forward(a.act, a.gate, a.fc, size_t(N) * H,
                     config_.mlp == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
  } else {
    k::gelu_forward(a.act, a.fc, size_t(N) * H);
  }
  linear_forward(l, Linear::FcProj, branch, a.act, N);
  k::dropout_apply(branch, size_t(N) * C, p, site_key(dropout_key, l, 1), first);
  k::residual_forward(a.res_out, a.res_mid, branch, size_t(N) * C);
}

float GPT::forward_range(const RangeInput& in, const int32_t* targets, float grad_scale,
                         uint64_t dropout_key) {
  FRUGAL_CHECK(B_ > 0, "internal: GPT::plan must be called before forward");
  const int B = B_, T = T_, C = config_.n_embd, N = B * T, V = config_.vocab_size;
  Slot& s = cur();
  s.dropout_key = dropout_key;
  s.dropout_p = grad_scale != 0.0f ? config_.dropout : 0.0f;  // evaluation runs without dropout
  s.backward_ready = grad_scale != 0.0f;
  int first_block = stage_.begin;
  if (in.activations) {
    FRUGAL_CHECK(in.first_block >= stage_.begin && in.first_block <= stage_.end,
                 "internal: activations entering block {} do not belong to blocks [{}, {})",
                 in.first_block, stage_.begin, stage_.end);
    FRUGAL_CHECK(in.first_block == stage_.begin || in.first_block <= frozen_,
                 "internal: cached prefix of {} blocks exceeds the frozen prefix {}", in.first_block, frozen_);
    first_block = in.first_block;
    std::memcpy(s.output(first_block - 1, stage_.begin), in.activations, sizeof(float) * N * C);
  } else {
    FRUGAL_CHECK(stage_.embeddings && in.tokens, "internal: a range without the embeddings needs its input activations");
  }
  if (stage_.embeddings && in.tokens) {  // kept for the embeddings' backward
    for (int i = 0; i < N; ++i)
      FRUGAL_CHECK(in.tokens[i] >= 0 && in.tokens[i] < V,
                   "token id {} at position {} is outside the vocabulary [0, {}); check that the data "
                   "was prepared with this model's tokenizer", in.tokens[i], i, V);
    std::memcpy(s.tokens.data(), in.tokens, sizeof(int32_t) * N);
    if (!in.activations) k::encoder_forward(s.input, s.tokens.data(), P(wte_), P(wpe_), B, T, C);
  }
  for (int l = first_block; l < stage_.end; ++l) {
    if (l < frozen_) {
      // The frozen prefix runs sample by sample: a GEMM's bits for a row depend on the call's row
      // count and the row's place in it (oneDNN's and OpenBLAS's AVX2 kernels), and AutoCache
      // serves a sample's prefix output, computed once, in later micro-batches with other
      // companions; computed alone, it is the same whichever micro-batch the sample is in. With
      // formats that allow it, the samples run in parallel, one thread each (a T-row GEMM runs
      // faster on one thread than split over several); each sample then gets the same bits
      // whichever thread runs it.
      const bool parallel = block_forward_reentrant(l);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
      for (int b = 0; b < B; ++b) block_forward(l, dropout_key, b, 1);
    } else {
      block_forward(l, dropout_key, 0, B);
    }
  }
  if (!stage_.head) return 0.0f;

  for (int i = 0; i < N; ++i)
    FRUGAL_CHECK(targets[i] >= -1 && targets[i] < V,
                 "target id {} at position {} is outside the vocabulary [0, {})", targets[i], i, V);
  std::memcpy(s.targets.data(), targets, sizeof(int32_t) * N);
  k::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, output(), P(lnf_w_), P(lnf_b_), N, C, config_.layernorm_eps);
  int valid = 0;
  for (int i = 0; i < N; ++i) valid += targets[i] >= 0;
  const float dloss = valid > 0 ? grad_scale / static_cast<float>(valid) : 0.0f;
  const bool head_trainable = !(config_.tied_head && frozen_ > 0);
  float* dhead = s.backward_ready && head_trainable ? grads_.data() + head_offset() : nullptr;
  k::lm_head_cross_entropy(s.losses, s.backward_ready ? s.dlnf : nullptr, dhead, s.lnf, P(head_offset()),
                           s.targets.data(), N, C, V, dloss);
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += s.losses[i];
  return valid > 0 ? static_cast<float>(sum / valid) : 0.0f;
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                   uint64_t dropout_key, const float* prefix_output, int prefix_blocks) {
  FRUGAL_CHECK(stage_.embeddings && stage_.head, "internal: GPT::forward runs the whole model; a "
               "block range or stage runs forward_range");
  return forward_range({inputs, prefix_output, prefix_output ? prefix_blocks : 0}, targets, grad_scale,
                       dropout_key);
}

void GPT::block_backward(int l, uint64_t dropout_key) {
  if (recompute_[l]) block_forward(l, dropout_key, 0, B_);
  const BlockOffsets& o = blocks_[l];
  const BlockActs& a = cur().acts[l];
  const int B = B_, T = T_, C = config_.n_embd, H = config_.ffn_hidden(), N = B * T;
  const float p = config_.dropout;
  const bool t = true;  // blocks reaching backward are trainable
  // d(branch) = dropout mask applied to the residual gradient
  auto branch_grad = [&](int site) -> const float* {
    if (p <= 0.0f) return dres_;
    std::memcpy(branch_, dres_, sizeof(float) * N * C);
    k::dropout_apply(branch_, size_t(N) * C, p, site_key(dropout_key, l, site));
    return branch_;
  };
  // MLP branch
  const float* dmlp = branch_grad(1);
  linear_backward(l, Linear::FcProj, dact_, dmlp, a.act, N, false);
  if (config_.gated()) {
    k::gated_backward(dgate_, dfc_, dact_, a.gate, a.fc, size_t(N) * H,
                      config_.mlp == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
    linear_backward(l, Linear::Fc, dln_, dfc_, a.ln2, N, false);
    linear_backward(l, Linear::Gate, dln_, dgate_, a.ln2, N, true);
  } else {
    k::gelu_backward(dfc_, dact_, a.fc, size_t(N) * H);
    linear_backward(l, Linear::Fc, dln_, dfc_, a.ln2, N, false);
  }
  k::layernorm_backward(dres_, G(o.ln2_w, t), G(o.ln2_b, t), dln_, a.res_mid, P(o.ln2_w), a.ln2_mean, a.ln2_rstd, N, C);
  // attention branch
  const float* dattn = branch_grad(0);
  linear_backward(l, Linear::Proj, datt_, dattn, a.att, N, false);
  k::attention_backward(dqkv_, datt_, a.qkv, a.att, a.lse, B, T, C, config_.n_head,
                        attention_patterns_[l]);
  linear_backward(l, Linear::Qkv, dln_, dqkv_, a.ln1, N, false);
  // The bottom trainable block need not pass a gradient further down unless embeddings train.
  const bool need_dinp = l > frozen_ || frozen_ == 0;  // (a later stage's l > frozen_ too)
  k::layernorm_backward(need_dinp ? dres_ : nullptr, G(o.ln1_w, t), G(o.ln1_b, t), dln_, block_input(l),
                        P(o.ln1_w), a.ln1_mean, a.ln1_rstd, N, C);
}

void GPT::backward_range(const float* doutput) {
  Slot& s = cur();
  FRUGAL_CHECK(s.backward_ready, "internal: backward needs a preceding training forward (grad_scale != 0)");
  FRUGAL_CHECK(stage_.head ? !doutput : doutput || frozen_ >= stage_.end, "internal: the range "
               "with the head starts backward from its loss; every other range takes the gradient "
               "of its output unless all its blocks are frozen");
  s.backward_ready = false;
  if (!stage_.head && !doutput) return;  // a frozen range: nothing to do
  const int B = B_, T = T_, C = config_.n_embd, N = B * T;
  if (stage_.head) {
    const bool top_trainable = frozen_ < config_.n_layer;
    std::memset(dres_, 0, sizeof(float) * N * C);
    // s.dlnf holds d loss / d lnf from the fused head; ln_f is trainable unless every block is
    // frozen (ln_f belongs to the top group, which stays trainable: freezing stops at the blocks).
    k::layernorm_backward(top_trainable ? dres_ : nullptr, grads_.data() + lnf_w_,
                          lnf_b_ == kAbsent ? nullptr : grads_.data() + lnf_b_, s.dlnf, output(),
                          P(lnf_w_), s.lnf_mean, s.lnf_rstd, N, C);
    if (grad_ready_) grad_ready_(table_.layer_range(config_.n_layer).first);
  } else {
    std::memcpy(dres_, doutput, sizeof(float) * N * C);
  }
  for (int l = stage_.end - 1; l >= std::max(frozen_, stage_.begin); --l) {
    block_backward(l, s.dropout_key);
    if (grad_ready_) grad_ready_(table_.layer_range(l).first);
  }
  if (stage_.embeddings && frozen_ == 0) {
    k::encoder_backward(defer_wte_grad_ ? nullptr : grads_.data() + wte_, grads_.data() + wpe_, dres_,
                        s.tokens.data(), B, T, C);
    if (grad_ready_) grad_ready_(0);
  }
}

const float* GPT::input_grad() const {
  FRUGAL_CHECK(!stage_.embeddings, "internal: the range with the embeddings has no input gradient");
  return frozen_ < stage_.begin || frozen_ == 0 ? dres_ : nullptr;
}

void GPT::zero_grad() {
  const size_t begin = trainable_begin();
  std::memset(grads_.data() + begin, 0, sizeof(float) * (table_.total() - begin));
}

void GPT::logits(const int32_t* inputs, int B, int T, float* out) {
  if (!planned_whole(B, T)) plan(B, T, recompute_);
  std::vector<int32_t> no_targets(size_t(B) * T, -1);
  forward(inputs, no_targets.data(), 0.0f);
  k::lm_head_logits(out, cur().lnf, P(head_offset()), B * T, config_.n_embd, config_.vocab_size);
}

}  // namespace frugal
