// Session: what is being trained — the model (or one block range of it), the AdamW optimizer over
// its parameters, the activation plan and the learning-rate schedule. The trainer, the step
// strategy and methods reach the model only through it, because a method may rebuild it at the
// Reconfigure safe point: hand it a new model configuration and a map from the old named tensors
// (weights and AdamW moments) to the new ones (reshape), or scale / replace the LR schedule.
// Everything that depends on the shapes (parameter table, gradient and moment buffers, activation
// arena) is rebuilt; the step count, frozen prefix and LR scale carry over; linear formats and
// attention patterns do not: the new model starts dense and causal, and a method that owns formats
// installs its own on the new shapes (Capabilities::follows_reshape). A re-partition (another block
// range or tensor shard of the same shapes) keeps what methods installed through the session, on
// every block, held or not: each model it builds gets the formats and patterns of its blocks.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"

namespace frugal {

// One model's tensors by name, for a reshape map: the weights and AdamW's two moments share the
// parameter table's offsets; the moments start at table.owned_begin() (a tensor before it, a tied
// head's copy, has empty moment views). Before the optimizer's first step its moments are zero and
// not allocated: m and v are then null and their views empty.
class NamedTensors {
 public:
  NamedTensors(const ParamTable& table, float* params, float* m, float* v, float* grads = nullptr)
      : table_(table), params_(params), m_(m), v_(v), grads_(grads) {}
  const ParamTable& table() const { return table_; }
  // The tensor's floats (numel of them); throws Error when the table has no such name.
  std::span<float> param(std::string_view name) const { return view(params_, 0, name); }
  std::span<float> m(std::string_view name) const { return view(m_, table_.owned_begin(), name); }
  std::span<float> v(std::string_view name) const { return view(v_, table_.owned_begin(), name); }
  // The model's gradient of the tensor (empty when not given: a reshape's map has none; a
  // re-partition's does, for a strategy that moves a step's gradients along).
  std::span<float> grad(std::string_view name) const { return view(grads_, 0, name); }
  // The whole flat buffers (table().total() floats; the moments from owned_begin()), for maps over
  // the complete layout.
  std::span<float> params() const { return {params_, table_.total()}; }
  std::span<float> m() const { return moments(m_); }
  std::span<float> v() const { return moments(v_); }

 private:
  // The tensor's floats in a buffer that starts at offset `begin` of the layout.
  std::span<float> view(float* base, size_t begin, std::string_view name) const;
  std::span<float> moments(float* base) const {
    return {base, base ? table_.total() - table_.owned_begin() : 0};
  }
  const ParamTable& table_;
  float *params_, *m_, *v_, *grads_;
};

// Fills the new model's tensors (all zero before the call) from the old model's.
using ReshapeMap = std::function<void(const NamedTensors& from, const NamedTensors& to)>;
// Copies every tensor (weights and both moments) that has the same name and shape in both.
void copy_same_shaped_tensors(const NamedTensors& from, const NamedTensors& to);

// Which blocks recompute their activations in backward, for a model of n_layer blocks.
using RecomputePolicy = std::function<std::vector<bool>(int n_layer)>;
// The learning rate of a 0-based optimizer step.
using LrSchedule = std::function<float(int64_t step)>;

// A time budget (train.budget = "seconds"): the run's horizon, fixed from timed steps, the mean
// seconds of a step of each kind (Method::step_plan; kind 0 is the configured model's) timed so far,
// 0 for a kind not timed yet, and an evaluation's seconds over those of a step of the kind it
// followed once one was timed (0 before; train.budget_evals).
struct TimeBudget {
  int64_t steps = 0;
  std::vector<double> step_seconds;
  double eval_ratio = 0;
};

struct SessionOptions {
  ModelConfig model;
  AdamWConfig optim;
  int batch = 1, seq_len = 1;    // the activation plan's (B, T)
  RecomputePolicy recompute;     // none recomputed when empty
  int64_t max_steps = 1;         // the default schedule's length: warm-up + cosine (lr_at)
  kernels::DType linear_dtype = kernels::DType::F32;  // GPT::set_linear_dtype of every model built
  kernels::Bf16Rounding weight_rounding;              // with it: how the bf16 weights are rounded
};

class Session {
 public:
  // Builds the whole model (weights zero: init_weights or a checkpoint fills them), its
  // optimizer and activation plan. `range`: the part of the model this process runs.
  explicit Session(const SessionOptions& options);
  Session(const SessionOptions& options, const BlockRange& range);

  GPT& model() { return *model_; }
  const GPT& model() const { return *model_; }
  AdamW& optim() { return *optim_; }
  const AdamW& optim() const { return *optim_; }

  // The learning rate of step `step`: the schedule's value times lr_scale().
  float lr(int64_t step) const;
  // Multiplies every later learning rate by `factor` (> 0); the scale is saved with the session.
  void scale_lr(double factor);
  double lr_scale() const { return lr_scale_; }
  // A time budget's horizon (train.budget = "seconds"): from now on the default schedule runs over
  // budget.steps steps instead of SessionOptions::max_steps (a schedule a method installed stays:
  // the method follows the horizon). Saved with the session, so a resume
  // keeps it; time_budget() is empty until it is set.
  void set_time_budget(TimeBudget budget);
  const std::optional<TimeBudget>& time_budget() const { return time_budget_; }
  // Replaces the schedule (the scale still applies). A function is not saved in checkpoints: a
  // method that replaces it installs it again at FitStart, which follows a resume.
  void set_lr_schedule(LrSchedule schedule);

  // Rebuilds the session around a model of `next` (the whole model only), `map` filling its
  // tensors from the current ones (null: leave them zero, e.g. a checkpoint is loaded next).
  // Call only at the Reconfigure safe point (or before training starts); references to the old
  // model and optimizer are invalid afterwards.
  void reshape(const ModelConfig& next, const ReshapeMap& map);
  // Rebuilds the session around `range` of the same model (a pipeline stage's blocks, or the
  // whole model), `fill` filling its weights and moments (from this session's tensors and from
  // the processes that hold the others; before the optimizer's first step `fill` sees no moments,
  // which are zero; it also sees both models' gradients, which a strategy may move along). With `tensor`, the new model is this rank's shard of that tensor-parallel
  // group (GPT's constructor; it must outlive the session); without, it is not split. A null
  // `fill` leaves the new model's weights and moments zero (a strategy that ends drops its part
  // this way: shards.h). Call only between steps; references to the old model and optimizer are
  // invalid afterwards.
  void repartition(const BlockRange& range, const ReshapeMap& fill, TensorCollectives* tensor = nullptr);
  // ZeRO (stages 1 and 2): from now on the optimizer keeps moments for, and updates, only
  // [begin, end) of the flat parameter buffer. Replaces the optimizer with a fresh one: call
  // before any optimizer state is loaded or step taken.
  void shard_optimizer(size_t begin, size_t end);
  // Moves the optimizer to the shard [begin, end) keeping its steps: its moments are copied from
  // m_whole and v_whole, the moments of the whole trainable buffer ([owned begin, total) of the
  // table, as an unsharded optimizer holds them). [owned begin, total) makes it whole again (what a
  // reshape needs: data parallelism gathers the shards first and cuts them again after).
  void reshard_optimizer(size_t begin, size_t end, const float* m_whole, const float* v_whole);

  // What a method installs on block `layer` (its format for a linear, null: the default one; its
  // attention pattern), kept for every block of the model whether or not this process's model
  // holds it, and installed on each model a re-partition builds (a pipeline stage's blocks moving
  // between ranks, the whole model gathered for a checkpoint, a tensor shard: which gets the
  // format's part, LinearFormat::cut); a reshape forgets them all. The model's own setters
  // (GPT::set_linear_format) install on it alone.
  void set_linear_format(int layer, GPT::Linear which, std::shared_ptr<LinearFormat> format);
  void set_attention_pattern(int layer, const kernels::AttentionPattern& pattern);

  // How many reshapes this session (and the run it continues) went through.
  int64_t reshapes() const { return reshapes_; }

  // What the checkpoint must keep to resume: the LR scale, the reshape count and the time budget
  // once set. (The model's current config is stored with its weights.)
  nlohmann::json save_state() const;
  void load_state(const nlohmann::json& state);

 private:
  void set_default_schedule(int64_t max_steps);  // warm-up + the optim config's decay (lr_at) over max_steps
  void plan(GPT& model) const;  // the activation plan of the options' (B, T) and recompute policy
  // Replaces the model by one of `config` holding `range` (tensor_'s shard of it), filled by `map`
  // (without `moments`, the map sees none and the new optimizer's stay zero; with `gradients` it
  // sees both models' gradient buffers); the frozen prefix and AdamW's step count carry over.
  void rebuild(const ModelConfig& config, const BlockRange& range, const ReshapeMap& map, bool moments,
               bool gradients);
  // Installs the kept formats and patterns of the blocks the model holds.
  void install_block_settings();
  // Installs a whole linear's format on the model if it holds the block: this rank's part of it
  // (LinearFormat::cut) when the model is a tensor shard that splits the linear.
  void install_format(int layer, GPT::Linear which, const std::shared_ptr<LinearFormat>& format);

  SessionOptions options_;
  // model_ before optim_: the optimizer refers to the model's parameter table.
  std::unique_ptr<GPT> model_;
  std::unique_ptr<AdamW> optim_;
  TensorCollectives* tensor_ = nullptr;  // the model is a shard of this group's (null: whole)
  LrSchedule schedule_;
  bool method_schedule_ = false;  // set_lr_schedule replaced the default (it follows the horizon itself)
  double lr_scale_ = 1.0;
  int64_t reshapes_ = 0;
  // What methods installed through the session, by block (and linear).
  std::map<std::pair<int, GPT::Linear>, std::shared_ptr<LinearFormat>> formats_;
  std::map<int, kernels::AttentionPattern> patterns_;
  std::optional<TimeBudget> time_budget_;
};

}  // namespace frugal
