// GPT forward/backward over the flat buffers; see gpt.h.
#include "frugal/model/gpt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/model/formats/bf16.h"
#include "frugal/model/formats/dense.h"

namespace frugal {

std::string MemoryPlan::describe(size_t optimizer_state_bytes) const {
  auto mib = [](double b) { return b / (1024.0 * 1024.0); };
  return fmt::format(
      "memory plan: parameters {:.1f} MiB, gradients {:.1f} MiB, optimizer state {:.1f} MiB, "
      "activations {:.1f} MiB{}, backward scratch {:.1f} MiB{}, total {:.1f} MiB",
      mib(parameters), mib(gradients), mib(optimizer_state_bytes), mib(activations),
      activation_dtype == kernels::DType::BF16 ? " (linear inputs in bf16)" : "", mib(scratch),
      working_copies > 0 ? fmt::format(", bf16 weight copies {:.1f} MiB", mib(working_copies)) : "",
      mib(double(parameters) + gradients + optimizer_state_bytes + activations + scratch + working_copies));
}

MemoryPlan GPT::memory_plan() const {
  MemoryPlan plan = plan_;
  size_t floats = 0;
  for_each_linear([&](int, Linear, LinearFormat& format, size_t, int oc, int ic) {
    if (dynamic_cast<const Bf16Format*>(&format)) floats += size_t(oc) * ic;
  });
  plan.working_copies = floats * sizeof(kernels::bf16) + objective_->working_copy_bytes();
  for (int l = range_.begin; l < range_.end; ++l) plan.working_copies += blocks_[l].mlp_working_copy_bytes();
  return plan;
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute,
                                kernels::DType dtype) {
  const BlockRange whole = BlockRange::whole(c);
  return estimate_memory(c, B, T, recompute, whole, whole, 1, {}, dtype);
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute,
                                const BlockRange& range) {
  return estimate_memory(c, B, T, recompute, range, range, 1);
}

MemoryPlan GPT::estimate_memory(const ModelConfig& c, int B, int T, const std::vector<bool>& recompute,
                                const BlockRange& range, const BlockRange& stage, int slots,
                                const ShardCoord& shard, kernels::DType dtype) {
  // In floats, each tensor rounded up to the alignment as ParamTable::build and plan() lay them
  // out, in double: absurd sizes give huge numbers instead of overflowing.
  constexpr double A = kAlign / sizeof(float);
  const auto rounded = [](double floats) { return std::ceil(floats / A) * A; };
  double parameters = 0;
  const ModelSpec spec = ModelSpec::build(c);
  for (const TensorSpec& t : spec.tensors()) {
    if (!range.holds(t, c)) continue;
    double numel = 1;
    for (int64_t d : t.local_shape(shard)) numel *= double(d);
    parameters += rounded(numel);
  }
  double activations = 0, scratch = 0;
  const auto count = [rounded](double* counter) {
    return [counter, rounded](double floats) -> float* {
      *counter += rounded(floats);
      return nullptr;
    };
  };
  Layout layout;
  lay_out(c, shard, *make_objective(c, ParamTable::build(c, range, shard)), double(B) * T, recompute, stage,
          slots, dtype, count(&activations), count(&scratch), layout);
  auto bytes = [](double floats) {
    const double b = floats * sizeof(float);
    return b < 0x1p63 ? static_cast<size_t>(b) : size_t{1} << 63;
  };
  return {bytes(parameters), bytes(parameters), bytes(activations), bytes(scratch), 0, dtype};
}

void GPT::lay_out(const ModelConfig& c, const ShardCoord& shard, const Objective& objective, double N,
                  const std::vector<bool>& recompute, const BlockRange& stage, int slots,
                  kernels::DType dtype, const Take& take_activation, const Take& take_scratch, Layout& out) {
  const auto recomputed = [&](int l) { return l < int(recompute.size()) && recompute[l]; };
  // The blocks of one kind (a dense or a mixture-of-experts MLP) lay out alike: a prototype without
  // tensors per kind present in the stage does it.
  const auto kind = [&](int l) { return c.moe.on(l) ? 1 : 0; };
  std::array<std::optional<TransformerBlock>, 2> prototype;
  for (int l = stage.begin; l < stage.end; ++l)
    if (!prototype[kind(l)]) prototype[kind(l)].emplace(c, shard, l, ParamTable{}, nullptr);
  // One shared set of internals per kind for the recomputed blocks, rebuilt per block during backward.
  std::array<BlockActs, 2> shared{};
  std::array<bool, 2> any_recomputed{};
  for (int l = stage.begin; l < stage.end; ++l) any_recomputed[kind(l)] |= recomputed(l);
  for (int i : {0, 1})
    if (any_recomputed[i]) prototype[i]->lay_out_internals(N, take_scratch, shared[i], dtype);
  // Per slot: the stage's input, each block's internals (unless recomputed) and output; with the
  // head, what the objective keeps. The residual stream holds n rows: this rank's under sequence
  // parallelism, else all N.
  const double n = shard.local_rows(N);
  out.slots.assign(slots, Slot{});
  for (Slot& s : out.slots) {
    s.input = take_activation(n * c.n_embd);
    if (stage.embeddings) TokenEmbedding::lay_out(c, N, take_activation, s.embedding);
    s.acts.assign(c.n_layer, BlockActs{});
    for (int l = stage.begin; l < stage.end; ++l) {
      if (recomputed(l))
        s.acts[l] = shared[kind(l)];
      else
        prototype[kind(l)]->lay_out_internals(N, take_activation, s.acts[l], dtype);
      s.acts[l].res_out = take_activation(n * c.n_embd);
    }
    if (stage.head) objective.lay_out(N, take_activation, s.objective);
  }
  out.dres = take_scratch(n * c.n_embd);
  if (stage.embeddings && c.encoder()) out.dsum = take_scratch(N * c.n_embd);
  // Sequence parallelism: the embeddings' and the head's room for every rank's rows (and the
  // head's gradient of them), shared by the slots.
  if (shard.split_rows() && (stage.embeddings || stage.head)) {
    float* joined = take_scratch(N * c.n_embd);
    float* joined_grad = stage.head ? take_scratch(N * c.n_embd) : nullptr;
    for (Slot& s : out.slots) {
      s.embedding.joined = joined;
      if (stage.head) s.objective[kJoinedRows] = joined, s.objective[kJoinedGrads] = joined_grad;
    }
  }
  // The blocks' scratch: one set per kind, shared by the blocks of that kind.
  std::array<BlockScratch, 2> scratch{};
  for (int i : {0, 1})
    if (prototype[i]) prototype[i]->lay_out_scratch(N, take_scratch, scratch[i], dtype);
  out.scratch.assign(c.n_layer, BlockScratch{});
  for (int l = stage.begin; l < stage.end; ++l) out.scratch[l] = scratch[kind(l)];
}

GPT::GPT(const ModelConfig& config) : GPT(config, BlockRange::whole(config)) {}

GPT::GPT(const ModelConfig& config, const BlockRange& range, TensorCollectives* tensor)
    : config_(config),
      range_(range),
      table_(ParamTable::build(config, range, tensor ? tensor->coord() : ShardCoord{})),
      dense_(std::make_shared<DenseFormat>()),
      embedding_(config, table_),
      objective_(make_objective(config, table_)),
      comm_(tensor ? tensor : &solo_),
      step_routing_(config, range),
      window_routing_(config, range),
      stage_(range) {
  params_.resize(table_.total());
  grads_.resize(table_.total());
  for (int l = 0; l < config_.n_layer; ++l) blocks_.emplace_back(config_, table_.shard(), l, table_, dense_);
  format_changed_at_.assign(config_.n_layer, 0);
  plan_.parameters = plan_.gradients = table_.total() * sizeof(float);
}

void GPT::init_weights(uint64_t seed) {
  const float residual_std = config_.init_std / std::sqrt(2.0f * config_.n_layer);
  const ShardCoord& shard = table_.shard();
  std::vector<float> whole;  // a split tensor's whole values, of which this rank keeps its part
  for (const ParamInfo& e : table_.entries()) {
    float* p = params_.data() + e.offset;
    if (e.init == Init::Zeros || e.init == Init::Ones) {
      std::fill(p, p + e.numel, e.init == Init::Ones ? 1.0f : 0.0f);
      continue;
    }
    const float std = e.init == Init::ResidualNormal ? residual_std : config_.init_std;
    // The values are those of the whole tensor (a tensor shard cuts its part from them), real
    // rows only: vocabulary padding rows stay zero.
    const bool split = shard.group_of(e.placement).size > 1;
    const size_t numel = split ? e.global_numel() : e.numel;
    const size_t n = e.used_rows < 0 ? numel : numel / size_t(e.shape[0]) * size_t(e.used_rows);
    if (split) whole.assign(numel, 0.0f);
    float* values = split ? whole.data() : p;
    uint64_t key = mix64(seed);
    for (char ch : e.name) key = mix64(key ^ static_cast<uint8_t>(ch));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      // Box-Muller from two counter-based uniforms: any thread count gives the same values.
      const double u1 = std::max(1e-12, static_cast<double>(uniform_at(key, 2 * i)));
      const double u2 = uniform_at(key, 2 * i + 1);
      values[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    if (split)
      e.copy_local(whole.data(), p, shard);
    else
      std::fill(p + n, p + e.numel, 0.0f);
  }
  mark_stale();  // the formats' working copies (bf16 weights) derive from the new weights
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
  const MemoryPlan planned =
      estimate_memory(config_, B, T, recompute_, range_, stage_, slots, table_.shard(), linear_dtype_);
  constexpr size_t A = kAlign / sizeof(float);
  // Hands out the arena in order, counting activations and backward scratch apart.
  arena_.resize((planned.activations + planned.scratch) / sizeof(float));
  size_t activations = 0, scratch = 0, cursor = 0;
  const auto take = [this, &cursor](size_t* counter) {
    return [this, &cursor, counter](double floats) {
      const size_t n = (static_cast<size_t>(floats) + A - 1) / A * A;
      *counter += n;
      float* p = arena_.data() + cursor;
      cursor += n;
      return p;
    };
  };
  Layout layout;
  lay_out(config_, table_.shard(), *objective_, double(B) * T, recompute_,
          stage_, slots, linear_dtype_, take(&activations), take(&scratch), layout);
  slots_ = std::move(layout.slots);
  for (Slot& s : slots_) {
    s.tokens.assign(size_t(B) * T, 0);
    s.targets.assign(size_t(B) * T, -1);
  }
  slot_ = 0;
  dres_ = layout.dres;
  dsum_ = layout.dsum;
  scratch_ = layout.scratch;
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
  const size_t wte = embedding_.token_offset();
  return {wte, wte + table_.at("transformer.wte.weight").numel};
}

std::pair<int, int> GPT::linear_shape(Linear which) const { return blocks_.front().linear_shape(which); }

size_t GPT::linear_weight_offset(int layer, Linear which) const {
  return blocks_.at(layer).weight_offset(which);
}

void GPT::set_linear_format(int layer, Linear which, std::shared_ptr<LinearFormat> format) {
  FRUGAL_CHECK(layer >= 0 && layer < config_.n_layer, "internal: no block {}", layer);
  FRUGAL_CHECK(linear_weight_offset(layer, which) != kAbsent, "internal: block {} has no such linear", layer);
  if (!format) format = default_format(linear_weight_offset(layer, which));
  if (blocks_[layer].set_format(which, format)) format_changed_at_[layer] = ++format_changes_;
  const auto [oc, ic] = linear_shape(which);
  format->refresh(params_.data() + linear_weight_offset(layer, which), oc, ic);
}

LinearFormat& GPT::linear_format(int layer, Linear which) const { return blocks_.at(layer).format(which); }

std::optional<LinearCut> GPT::linear_cut(int layer, Linear which) const {
  const size_t offset = linear_weight_offset(layer, which);
  const auto weight = std::ranges::find_if(table_.entries(), [&](const ParamInfo& e) { return e.offset == offset; });
  FRUGAL_CHECK(offset != kAbsent && weight != table_.entries().end(), "internal: block {} holds no such linear", layer);
  const ShardCoord shard = table_.shard();
  if (shard.group_of(weight->placement).size == 1) return std::nullopt;
  const auto [oc, ic] = linear_shape(which);
  const TensorSpec& spec = *weight;
  return LinearCut{oc, ic, [spec, shard](const uint8_t* whole, uint8_t* part) { spec.copy_local(whole, part, shard); },
                   int(spec.shape[0]), spec.whole_rows(shard)};
}

void GPT::set_attention_pattern(int layer, const kernels::AttentionPattern& pattern) {
  FRUGAL_CHECK(layer >= 0 && layer < config_.n_layer, "internal: no block {}", layer);
  FRUGAL_CHECK(pattern.is_causal() != config_.encoder(), "internal: {} attention in a {}", pattern.name(),
               config_.encoder() ? "bidirectional encoder" : "causal decoder");
  if (blocks_[layer].attention_pattern() != pattern) format_changed_at_[layer] = ++format_changes_;
  blocks_[layer].set_attention_pattern(pattern);
}

const kernels::AttentionPattern& GPT::attention_pattern(int layer) const {
  return blocks_.at(layer).attention_pattern();
}

uint64_t GPT::prefix_format_version(int blocks) const {
  uint64_t version = 0;
  for (int l = range_.begin; l < std::min(blocks, range_.end); ++l) version = std::max(version, format_changed_at_[l]);
  return version;
}

void GPT::for_each_linear(const std::function<void(int, Linear, LinearFormat&, size_t, int, int)>& f) const {
  for (int l = range_.begin; l < range_.end; ++l)
    for (int i = 0; i < kLinears; ++i) {
      const auto which = static_cast<Linear>(i);
      const size_t offset = linear_weight_offset(l, which);
      if (offset == kAbsent) continue;
      const auto [oc, ic] = linear_shape(which);
      f(l, which, blocks_[l].format(which), offset, oc, ic);
    }
}

std::shared_ptr<LinearFormat> GPT::default_format(size_t offset) const {
  if (linear_dtype_ != kernels::DType::BF16) return dense_;
  return std::make_shared<Bf16Format>(weight_rounding(offset));
}

kernels::Bf16Rounding GPT::weight_rounding(size_t offset) const {
  return weight_rounding_.from(table_.global_offset(offset));
}

bool GPT::is_default_format(const LinearFormat& format) const {
  return &format == dense_.get() || dynamic_cast<const Bf16Format*>(&format) != nullptr;
}

void GPT::set_linear_dtype(kernels::DType dtype, const kernels::Bf16Rounding& weight_rounding) {
  const kernels::Bf16Rounding base{weight_rounding.stochastic, weight_rounding.seed};
  if (dtype == linear_dtype_ && base == weight_rounding_) return;
  linear_dtype_ = dtype;
  weight_rounding_ = base;
  for_each_linear([&](int layer, Linear which, LinearFormat& format, size_t, int, int) {
    if (is_default_format(format)) set_linear_format(layer, which, nullptr);
  });
  const WeightRounding rounding = [this](size_t offset) { return this->weight_rounding(offset); };
  for (int l = range_.begin; l < range_.end; ++l) blocks_[l].set_mlp_dtype(dtype, rounding);
  objective_->set_dtype(dtype, rounding);
  refresh_formats();
  if (B_ > 0) plan(B_, T_, recompute_, stage_, slots());  // the activations' dtype changed
}

void GPT::refresh_formats() {
  mark_stale();
  prepare_formats();
}

void GPT::prepare_formats() const {
  if (!formats_stale_) return;
  for_each_linear([&](int, Linear, LinearFormat& format, size_t offset, int oc, int ic) {
    if (copies_written_ && dynamic_cast<const Bf16Format*>(&format)) return;  // update_params wrote it
    format.refresh(params_.data() + offset, oc, ic);
  });
  for (int l = range_.begin; l < range_.end; ++l) blocks_[l].refresh_mlp(params_.data());
  if (!copies_written_) objective_->refresh(params_.data());
  formats_stale_ = copies_written_ = false;
}

void GPT::update_params(const ParamUpdate& update) {
  std::vector<WorkingCopy> copies;
  if (!formats_stale_) {
    for_each_linear([&](int, Linear, LinearFormat& format, size_t offset, int oc, int ic) {
      if (auto* bf16 = dynamic_cast<Bf16Format*>(&format))
        copies.push_back({offset, size_t(oc) * ic, bf16->working_copy(), bf16->weight_rounding()});
    });
    if (const WorkingCopy head = objective_->working_copy(); head.data) copies.push_back(head);
  }
  update(params_.data(), copies);
  mark_stale();
  copies_written_ = !copies.empty();
}

void GPT::write_effective_weights() {
  for_each_linear([&](int, Linear, LinearFormat& format, size_t offset, int oc, int ic) {
    format.write_effective_weight(params_.data() + offset, oc, ic);
    format.refresh(params_.data() + offset, oc, ic);
  });
}

FeedForward::Report GPT::block_forward(int l, uint64_t dropout_key, int b0, int nb) {
  const size_t row0 = size_t(b0) * T_;  // 0 under sequence parallelism: the whole micro-batch
  const BlockActs a = blocks_[l].rows(cur().acts[l], row0);
  const size_t first = row0 * config_.n_embd;
  BlockScratch scratch = scratch_[l];
  scratch.branch += first;
  return blocks_[l].forward(params_.data(), a, block_input(l) + first, scratch, nb, T_,
                            {cur().dropout_p, dropout_key, first + dropout_first()}, *comm_);
}

size_t GPT::dropout_first() const { return table_.shard().first_row(size_t(B_) * T_) * config_.n_embd; }

float GPT::forward_range(const RangeInput& in, const int32_t* targets, float grad_scale,
                         uint64_t dropout_key) {
  FRUGAL_CHECK(B_ > 0, "internal: GPT::plan must be called before forward");
  prepare_formats();
  const int B = B_, T = T_, C = config_.n_embd, N = B * T, V = config_.vocab_size;
  const size_t n = static_cast<size_t>(table_.shard().local_rows(N));  // the residual stream's rows
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
    std::memcpy(s.output(first_block - 1, stage_.begin), in.activations, sizeof(float) * n * C);
  } else {
    FRUGAL_CHECK(stage_.embeddings && in.tokens, "internal: a range without the embeddings needs its input activations");
  }
  if (stage_.embeddings && in.tokens) {  // kept for the embeddings' backward
    for (int i = 0; i < N; ++i)
      FRUGAL_CHECK(in.tokens[i] >= 0 && in.tokens[i] < V,
                   "token id {} at position {} is outside the vocabulary [0, {}); check that the data "
                   "was prepared with this model's tokenizer", in.tokens[i], i, V);
    std::memcpy(s.tokens.data(), in.tokens, sizeof(int32_t) * N);
    if (!in.activations) embedding_.forward(params_.data(), s.input, s.tokens.data(), B, T, *comm_, 0, s.embedding);
  }
  const bool training = grad_scale != 0.0f;
  s.grad_scale = grad_scale;
  // The mixture-of-experts blocks' reports: their auxiliary losses, summed over the blocks, and
  // (training) their load.
  RoutingStats routing(config_, stage_);
  for (int l = first_block; l < stage_.end; ++l) {
    FeedForward::Report report;
    if (l < frozen_) {
      // The frozen prefix runs sample by sample: a GEMM's bits for a row depend on the call's row
      // count and the row's place in it (oneDNN's and OpenBLAS's AVX2 kernels), and AutoCache
      // serves a sample's prefix output, computed once, in later micro-batches with other
      // companions; computed alone, it is the same whichever micro-batch the sample is in. With
      // formats that allow it, the samples run in parallel, one thread each (a T-row GEMM runs
      // faster on one thread than split over several); each sample then gets the same bits
      // whichever thread runs it. A tensor- or expert-parallel shard runs them one after the
      // other: its groups' collectives must come in the same order on every rank.
      // A mixture of experts reports each sample's load and auxiliary losses: their sum and mean.
      const ShardCoord& shard = table_.shard();
      const bool parallel = blocks_[l].reentrant_forward() && shard.size == 1 && shard.expert_size == 1;
      std::vector<FeedForward::Report> samples(B);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
      for (int b = 0; b < B; ++b) samples[b] = block_forward(l, dropout_key, b, 1);
      report = std::move(samples[0]);
      for (int b = 1; b < B; ++b) {
        for (size_t e = 0; e < report.load.size(); ++e) report.load[e] += samples[b].load[e];
        for (size_t i = 0; i < report.auxiliary.size(); ++i) report.auxiliary[i].second += samples[b].auxiliary[i].second;
      }
      for (auto& a : report.auxiliary) a.second /= B;
    } else {
      report = block_forward(l, dropout_key, 0, B);
    }
    if (blocks_[l].moe()) routing.add(l, report);
  }
  if (training) {
    routing.forwards = 1;
    step_routing_.add(routing);
    window_routing_.add(routing);
  }
  if (!stage_.head) return 0.0f;

  for (int i = 0; i < N; ++i)
    FRUGAL_CHECK(targets[i] >= -1 && targets[i] < V,
                 "target id {} at position {} is outside the vocabulary [0, {})", targets[i], i, V);
  std::memcpy(s.targets.data(), targets, sizeof(int32_t) * N);
  const bool head_trainable = !(config_.tied_head && frozen_ > 0);
  float* grads = s.backward_ready && head_trainable ? grads_.data() : nullptr;
  loss_terms_ = objective_->forward(params_.data(), grads, s.objective, output(), s.targets.data(), N,
                                    grad_scale, *comm_);
  for (const auto& [name, value] : routing.auxiliary) loss_terms_.auxiliary.emplace_back(name, float(value));
  return loss_terms_.loss;
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                   uint64_t dropout_key, const float* prefix_output, int prefix_blocks) {
  FRUGAL_CHECK(stage_.embeddings && stage_.head, "internal: GPT::forward runs the whole model; a "
               "block range or stage runs forward_range");
  return forward_range({inputs, prefix_output, prefix_output ? prefix_blocks : 0}, targets, grad_scale,
                       dropout_key);
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
  const size_t n = static_cast<size_t>(table_.shard().local_rows(N));  // the residual stream's rows
  if (stage_.head) {
    const bool top_trainable = frozen_ < config_.n_layer;
    std::memset(dres_, 0, sizeof(float) * n * C);
    // The objective's training forward started the backward; its norm is trainable unless every
    // block is frozen (it belongs to the top group, which stays trainable: freezing stops at the
    // blocks).
    objective_->backward(params_.data(), grads_.data(), s.objective, output(),
                         top_trainable ? dres_ : nullptr, N, true, *comm_);
    if (grad_ready_) grad_ready_(table_.layer_range(config_.n_layer).first);
  } else {
    std::memcpy(dres_, doutput, sizeof(float) * n * C);
  }
  for (int l = stage_.end - 1; l >= std::max(frozen_, stage_.begin); --l) {
    if (recompute_[l]) block_forward(l, s.dropout_key, 0, B_);
    // The bottom trainable block need not pass a gradient further down unless embeddings train.
    const bool need_dinp = l > frozen_ || frozen_ == 0;  // (a later stage's l > frozen_ too)
    blocks_[l].backward(params_.data(), grads_.data(), s.acts[l], block_input(l), dres_, scratch_[l], B, T,
                        {config_.dropout, s.dropout_key, dropout_first()}, need_dinp, s.grad_scale, *comm_);
    if (grad_ready_) grad_ready_(table_.layer_range(l).first);
  }
  if (stage_.embeddings && frozen_ == 0) {
    embedding_.backward(params_.data(), grads_.data(), dres_, s.tokens.data(), B, T, !defer_wte_grad_, *comm_,
                        s.embedding, dsum_);
    if (grad_ready_) grad_ready_(0);
  }
}

const float* GPT::input_grad() const {
  FRUGAL_CHECK(!stage_.embeddings, "internal: the range with the embeddings has no input gradient");
  return frozen_ < stage_.begin || frozen_ == 0 ? dres_ : nullptr;
}

void GPT::balance_experts() {
  if (config_.moe.bias_rate > 0)
    for (size_t i = 0; i < step_routing_.layers.size(); ++i) {
      const int l = step_routing_.layers[i];
      if (l < frozen_) continue;
      const auto load = step_routing_.load.begin() + i * step_routing_.experts;
      blocks_[l].moe()->balance(params_.data(), {load, load + step_routing_.experts});
    }
  step_routing_.clear();
}

RoutingStats GPT::take_routing() {
  RoutingStats window = window_routing_;
  window_routing_.clear();
  return window;
}

void GPT::zero_grad() {
  const size_t begin = trainable_begin();
  std::memset(grads_.data() + begin, 0, sizeof(float) * (table_.total() - begin));
}

void GPT::logits(const int32_t* inputs, int B, int T, float* out) {
  if (!planned_whole(B, T)) plan(B, T, recompute_);
  std::vector<int32_t> no_targets(size_t(B) * T, -1);
  forward(inputs, no_targets.data(), 0.0f);
  objective_->logits(params_.data(), cur().objective, output(), out, B * T);
}

int64_t GPT::correct_predictions(const int32_t* targets) {
  FRUGAL_CHECK(config_.encoder(), "internal: masked-token accuracy is an encoder's (model.objective = \"mlm\")");
  FRUGAL_CHECK(stage_.begin == 0 && stage_.end == config_.n_layer, "internal: accuracy of a pipeline stage's range");
  const int C = config_.n_embd, V = config_.vocab_size;
  const size_t N = size_t(B_) * T_;
  constexpr int kRows = 64;  // rows whose logits exist at once
  std::vector<float> rows(size_t(kRows) * C), logits(size_t(kRows) * V);
  std::vector<int32_t> wanted;
  int64_t correct = 0;
  const auto score = [&] {
    const int M = static_cast<int>(wanted.size());
    objective_->logits(params_.data(), {}, rows.data(), logits.data(), M);
    for (int i = 0; i < M; ++i) {
      const float* row = logits.data() + size_t(i) * V;
      correct += std::max_element(row, row + V) - row == wanted[size_t(i)];
    }
    wanted.clear();
  };
  for (size_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    std::copy_n(output() + n * C, C, rows.data() + wanted.size() * C);
    wanted.push_back(targets[n]);
    if (wanted.size() == kRows) score();
  }
  if (!wanted.empty()) score();
  return correct;
}

}  // namespace frugal
