// The `freeze` method plugin: a fixed frozen prefix (fine-tuning) and/or PipeTransformer's
// progressive freezing (α schedule per interval, optionally bounded by the adaptive gradient-change
// criterion). Frozen blocks (with the embeddings) form a bottom-up prefix: they run no backward and
// leave the optimizer (GPT::set_frozen_prefix), changed only at the Reconfigure safe point. With
// AutoCache the prefix's output is cached per sample and fed back on revisits (autocache.h).
#pragma once
#include <algorithm>

#include "frugal/methods/freeze/autocache.h"
#include "frugal/methods/method.h"

namespace frugal::freeze {

struct FreezeConfig {
  int frozen_layers = 0;  // frozen from the start
  double alpha = 0;       // progressive schedule; 0: off
  int interval = 100;     // steps per freeze interval
  bool adaptive = false;  // min(α bound, gradient-change criterion)
  int max_frozen = -1;    // cap on the frozen prefix; -1: n_layer - 1
  AutoCacheConfig autocache;
};

MethodInfo method_info();

class FreezeMethod final : public Method {
 public:
  explicit FreezeMethod(FreezeConfig config) : config_(config), autocache_(config.autocache) {}
  std::string name() const override { return "freeze"; }
  Capabilities capabilities() const override {
    // Only the adaptive criterion reads gradients (every trainable block's norms).
    return {.changes_trainable_set = true, .follows_reshape = true, .reads_all_gradients = config_.adaptive,
            .gradient_sums_only = true,
            .most_frozen = config_.alpha <= 0       ? config_.frozen_layers
                           : config_.max_frozen < 0 ? -1
                                                    : std::max(config_.frozen_layers, config_.max_frozen),
            .follows_horizon = true};
  }
  bool match(Event event, const TrainContext& ctx) const override;
  void apply(Event event, TrainContext& ctx) override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;
  // Added on a resume: the fixed prefix holds from the resumed step, and the progressive schedule
  // counts its intervals from there.
  std::string cannot_start_mid_run() const override { return {}; }

  int frozen() const { return frozen_; }
  bool autocache_active() const { return autocache_.active(); }

 private:
  int cap(const GPT& model) const;
  // Each trainable block's sum of squared gradients over the part of it this rank holds (see
  // TrainContext::sum_over_parts); 0 for frozen blocks and those of other pipeline stages.
  std::vector<double> block_grad_squares(GPT& model) const;
  // After a reshape: freezing starts again on the new model (the configured prefix, the schedule's
  // intervals and the adaptive criterion's norms from zero, AutoCache emptied).
  void restart(TrainContext& ctx);
  FreezeConfig config_;
  AutoCache autocache_;
  int frozen_ = 0, target_ = 0, intervals_done_ = 0;
  std::vector<double> norm_sum_, prev_norm_;
  int norm_samples_ = 0;
};

}  // namespace frugal::freeze
