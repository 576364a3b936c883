// The training session and its rebuilding; see session.h.
#include "frugal/session/session.h"

#include <algorithm>

#include "frugal/core/error.h"

namespace frugal {

std::span<float> NamedTensors::view(float* base, size_t begin, std::string_view name) const {
  const ParamInfo& e = table_.at(name);
  if (!base || e.offset < begin) return {};
  return {base + (e.offset - begin), e.numel};
}

void copy_same_shaped_tensors(const NamedTensors& from, const NamedTensors& to) {
  for (const ParamInfo& e : to.table().entries()) {
    const ParamInfo* old = from.table().find(e.name);
    if (!old || old->shape != e.shape) continue;
    for (auto get : {&NamedTensors::param, &NamedTensors::m, &NamedTensors::v}) {
      const std::span<float> src = (from.*get)(e.name), dst = (to.*get)(e.name);
      if (src.size() == dst.size()) std::ranges::copy(src, dst.begin());
    }
  }
}

Session::Session(const SessionOptions& options) : Session(options, BlockRange::whole(options.model)) {}

Session::Session(const SessionOptions& options, const BlockRange& range) : options_(options) {
  set_default_schedule(options.max_steps);
  model_ = std::make_unique<GPT>(options.model, range);
  model_->set_linear_dtype(options.linear_dtype, options.weight_rounding);
  plan(*model_);
  optim_ = std::make_unique<AdamW>(model_->table(), options.optim);
}

void Session::plan(GPT& model) const {
  model.plan(options_.batch, options_.seq_len,
             options_.recompute ? options_.recompute(model.config().n_layer) : std::vector<bool>{});
}

float Session::lr(int64_t step) const { return static_cast<float>(schedule_(step) * lr_scale_); }

void Session::scale_lr(double factor) {
  FRUGAL_CHECK(factor > 0, "internal: learning-rate scale factor {} must be positive", factor);
  lr_scale_ *= factor;
}

void Session::set_default_schedule(int64_t max_steps) {
  schedule_ = [optim = options_.optim, max_steps](int64_t step) { return lr_at(optim, step, max_steps); };
}

void Session::set_time_budget(TimeBudget budget) {
  FRUGAL_CHECK(budget.steps >= 1, "internal: a time budget of {} steps", budget.steps);
  if (!method_schedule_) set_default_schedule(budget.steps);
  time_budget_ = std::move(budget);
}

void Session::set_lr_schedule(LrSchedule schedule) {
  FRUGAL_CHECK(schedule != nullptr, "internal: empty learning-rate schedule");
  schedule_ = std::move(schedule);
  method_schedule_ = true;
}

void Session::reshape(const ModelConfig& next, const ReshapeMap& map) {
  const BlockRange whole = BlockRange::whole(model_->config());
  FRUGAL_CHECK(model_->range() == whole, "internal: only a session of the whole model can be "
               "reshaped (a pipeline stage is re-partitioned by its strategy)");
  FRUGAL_CHECK(!optim_->sharded(), "internal: a method reshaped the model while the optimizer state "
               "is sharded (the data-parallel step gathers it whole around Reconfigure)");
  formats_.clear();
  patterns_.clear();
  rebuild(next, BlockRange::whole(next), map, true, false);
  ++reshapes_;
}

void Session::repartition(const BlockRange& range, const ReshapeMap& fill, TensorCollectives* tensor) {
  FRUGAL_CHECK(!fill || !optim_->sharded(), "internal: a session with a sharded optimizer is re-partitioned");
  tensor_ = tensor;
  // Before the first step the moments are zero: allocating them now would take their memory early.
  rebuild(model_->config(), range, fill, optim_->steps_taken() > 0, true);
  install_block_settings();
}

void Session::set_linear_format(int layer, GPT::Linear which, std::shared_ptr<LinearFormat> format) {
  install_format(layer, which, format);
  formats_[{layer, which}] = std::move(format);
}

void Session::install_format(int layer, GPT::Linear which, const std::shared_ptr<LinearFormat>& format) {
  if (!model_->range().contains(layer)) return;
  const std::optional<LinearCut> cut = format ? model_->linear_cut(layer, which) : std::nullopt;
  model_->set_linear_format(layer, which, cut ? format->cut(*cut) : format);
}

void Session::set_attention_pattern(int layer, const kernels::AttentionPattern& pattern) {
  if (model_->range().contains(layer)) model_->set_attention_pattern(layer, pattern);
  patterns_.insert_or_assign(layer, pattern);
}

void Session::install_block_settings() {
  for (const auto& [key, format] : formats_) install_format(key.first, key.second, format);
  for (const auto& [layer, pattern] : patterns_)
    if (model_->range().contains(layer)) model_->set_attention_pattern(layer, pattern);
}

void Session::rebuild(const ModelConfig& config, const BlockRange& range, const ReshapeMap& map, bool moments,
                      bool gradients) {
  auto next_model = std::make_unique<GPT>(config, range, tensor_);
  next_model->set_linear_dtype(options_.linear_dtype, options_.weight_rounding);
  auto next_optim = std::make_unique<AdamW>(next_model->table(), options_.optim);
  if (map) {
    const NamedTensors from(model_->table(), model_->params(), moments ? optim_->m() : nullptr,
                            moments ? optim_->v() : nullptr, gradients ? model_->grads() : nullptr);
    const NamedTensors to(next_model->table(), next_model->params(), moments ? next_optim->m() : nullptr,
                          moments ? next_optim->v() : nullptr, gradients ? next_model->grads() : nullptr);
    map(from, to);
  }
  next_model->set_frozen_prefix(std::min(model_->frozen_prefix(), config.n_layer));
  next_optim->set_steps_taken(optim_->steps_taken());
  optim_.reset();  // before the model whose table it refers to
  model_ = std::move(next_model);
  optim_ = std::move(next_optim);
  plan(*model_);  // once the old model's activations are gone: the two are never held together
}

void Session::shard_optimizer(size_t begin, size_t end) {
  FRUGAL_CHECK(optim_->steps_taken() == 0, "internal: the optimizer is sharded after it took steps");
  optim_ = std::make_unique<AdamW>(model_->table(), options_.optim, begin, end);
}

void Session::reshard_optimizer(size_t begin, size_t end, const float* m_whole, const float* v_whole) {
  const size_t first = model_->table().owned_begin();
  FRUGAL_CHECK(first <= begin && begin <= end && end <= model_->table().total(), "internal: shard [{}, {}) "
               "outside the trainable buffer [{}, {})", begin, end, first, model_->table().total());
  const int64_t steps = optim_->steps_taken();
  optim_.reset();
  optim_ = std::make_unique<AdamW>(model_->table(), options_.optim, begin, end);
  optim_->set_steps_taken(steps);
  std::copy(m_whole + (begin - first), m_whole + (end - first), optim_->m());
  std::copy(v_whole + (begin - first), v_whole + (end - first), optim_->v());
}

nlohmann::json Session::save_state() const {
  nlohmann::json state{{"lr_scale", lr_scale_}, {"reshapes", reshapes_}};
  if (time_budget_) {
    state["budget_steps"] = time_budget_->steps;
    state["budget_step_seconds"] = time_budget_->step_seconds;
    state["budget_eval_ratio"] = time_budget_->eval_ratio;
  }
  return state;
}

void Session::load_state(const nlohmann::json& state) {
  lr_scale_ = state.at("lr_scale").get<double>();
  reshapes_ = state.at("reshapes").get<int64_t>();
  if (state.contains("budget_steps"))  // checkpoints before the step kinds or evaluations: none timed
    set_time_budget({state.at("budget_steps").get<int64_t>(),
                     state.value("budget_step_seconds", std::vector<double>{}), state.value("budget_eval_ratio", 0.0)});
}

}  // namespace frugal
