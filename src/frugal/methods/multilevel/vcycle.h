// The `multilevel` method plugin: the V-cycle of multi-level training (Zou et al., ICLR 2024)
// inside one run. Level 1 is the configured model; level i+1 is level i coalesced by the i-th
// transition's spec (coalescing.h). The run's steps are cut into 2k-1 segments by `shares`: level
// 1, 2, ..., k, then k-1, ..., 1. Going down a level, the model is coalesced and the level's
// weights are kept; coming back up, the small model is de-coalesced and interpolated with the
// kept weights: θ <- (1-α)·θ_kept + α·decoalesce(θ_small). Every switch happens at the
// Reconfigure safe point through Session::reshape. Each level trains at its own LR factor times
// the schedule (lr_schedule: the run's, or restarted per segment; no new warm-up). The optimizer's
// state at a switch — AdamW's moments, and Muon's momentum, which lives in AdamW's m — is mapped
// through the same operator as the weights, or fresh (zero, bias correction restarted).
// Checkpoints keep the segment, the per-level statistics and the kept weights, so a run resumes
// bit-exactly at any point of the cycle. The segments are shares of the run's horizon
// (TrainContext::max_steps): under a time budget, the steps the trainer fixes from timed steps,
// first level 1's and then again from each level's own (step_plan tells it which step runs which
// level); the segments and their schedule follow each new horizon.
#pragma once
#include <optional>
#include <string_view>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/methods/method.h"
#include "frugal/methods/multilevel/coalescing.h"

namespace frugal::multilevel {

enum class MomentRule { Fresh, Mapped };
// The learning rate over the cycle: (Segment, the default and the released code's) the run's
// warm-up in the first segment and then, in every later segment, a cosine from optim.lr down to
// optim.min_lr over its own steps; or the run's schedule throughout (Run).
enum class LrShape { Run, Segment };

struct VCycleConfig {
  int levels = 2;
  std::vector<double> shares;      // 2·levels-1 segments, summing to 1
  std::vector<double> lr_factors;  // per level, level 1 first
  std::vector<double> alphas;      // per transition (levels-1): the interpolation on the way up
  std::vector<CoalesceSpec> specs; // per transition
  MomentRule moments = MomentRule::Fresh;
  LrShape lr_shape = LrShape::Segment;
  int fewest_blocks = 0;           // of any level, for Capabilities
};

MethodInfo method_info();

// The maps level i -> level i+1 of a cycle whose level 1 is `level1`; throws Error naming the
// transition (and its config key) whose spec does not fit.
std::vector<LevelMap> level_maps(const ModelConfig& level1, const std::vector<CoalesceSpec>& specs);

class VCycleMethod final : public Method {
 public:
  VCycleMethod(VCycleConfig config, int64_t max_steps);
  std::string name() const override { return "multilevel"; }
  Capabilities capabilities() const override {
    return {.changes_shapes = true, .fewest_blocks = config_.fewest_blocks, .follows_horizon = true};
  }
  // The methods that follow its reshapes fire after it at Reconfigure.
  std::vector<std::string> runs_before() const override { return {"freeze", "sparse24", "mst"}; }
  bool match(Event event, const TrainContext& ctx) const override;
  void apply(Event event, TrainContext& ctx) override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;
  StateTensors state_tensors() const override;
  void load_state_tensors(std::map<std::string, std::vector<float>> tensors) override;
  // Checks the model is the saved level's; a coalesced level says so, with both shapes.
  std::string restore_trained_function(TrainContext& ctx) override;
  std::string unfinished_at_end() const override;
  // Its segments' levels, a level's steps estimated to cost relative_cost(level) of level 1's.
  std::optional<StepPlan> step_plan(int64_t horizon) const override;
  std::string cannot_start_mid_run() const override {
    return "its V-cycle's segments are shares of the run from step 0, which starts at level 1";
  }

  int level() const { return level_of(segment_); }  // 0-based: 0 is the configured model
  // The first step of segment s + 1 (the end of segment s), for a run of max_steps.
  static std::vector<int64_t> segment_ends(const std::vector<double>& shares, int64_t max_steps);

 private:
  struct LevelStats {
    int64_t steps = 0;
    double seconds = 0, flops = 0;
  };
  int level_of(int segment) const;
  int last_segment() const { return 2 * config_.levels - 2; }
  const ModelConfig& level_config(int level) const;  // 0-based, from maps_
  // Rebuilds maps_ from level 1's shape (`model`'s at a fresh start, the saved one after
  // load_state) and checks that `model` is the current level's and that the kept weights of the
  // levels above it are all there (a missing methods.safetensors) and fit.
  void restore_levels(const ModelConfig& model);
  // Moves to the next segment: one coalescing or de-coalescing with interpolation.
  void advance(TrainContext& ctx);
  // Cuts a run of `horizon` steps into the segments; with a `horizon_key`, throws when level 1 gets
  // no step at its start or end, naming that key (the one that sets the horizon).
  void plan_segments(int64_t horizon, std::string_view horizon_key);
  // Plans the segments over ctx.max_steps (at the start, and when a time budget fixes the horizon)
  // and installs the segments' learning-rate schedule.
  void follow_horizon(TrainContext& ctx);
  // A level's step cost relative to level 1's, from its weights and attention per token.
  double relative_cost(int level) const;

  VCycleConfig config_;
  std::vector<int64_t> ends_;  // segment_ends over horizon_
  int64_t horizon_ = 0;
  int seq_len_ = 0;            // T, for relative_cost
  std::vector<LevelMap> maps_; // maps_[i]: level i -> level i+1
  int segment_ = 0;
  // kept_[i]: level i's weights saved when it was coalesced, until the cycle comes back to it
  std::vector<std::vector<float>> kept_;
  std::vector<LevelStats> stats_;
  // The level-0 shape's dims, saved so a resume (whose model may be any level) rebuilds maps_.
  int level0_layers_ = 0, level0_heads_ = 0, level0_embd_ = 0;
  // The current step's level and timer (BatchStart to BatchEnd, the switch included).
  int step_level_ = 0;
  Timer step_timer_;
};

}  // namespace frugal::multilevel
