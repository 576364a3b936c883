// MethodSet: the enabled methods of a run, ordered by their declared runs-before constraints,
// checked for conflicts at start-up, fired on every event, saved and restored with checkpoints.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "frugal/methods/method.h"

namespace frugal {

class MethodSet {
 public:
  MethodSet() = default;
  // Builds the methods whose [methods.<name>] table is present. Throws Error naming both methods
  // for a declared conflict, and for a runs-before cycle.
  static MethodSet from_config(const io::Config& config);
  // Orders the given methods (topologically by runs_before, otherwise keeping the given order).
  explicit MethodSet(std::vector<std::unique_ptr<Method>> methods);

  void fire(Event event, TrainContext& ctx);
  // Whether a method that reads every block's gradients (Capabilities::reads_all_gradients) acts
  // at this step's AfterGradReduce: a strategy that leaves ranks only their shard's gradients
  // (ZeRO-2) gathers them whole first. With `sums_serve`, not counting the methods that read only
  // per-block sums (gradient_sums_only), which a strategy serves with TrainContext::sum_over_parts.
  bool reads_all_gradients_now(const TrainContext& ctx, bool sums_serve = false) const;
  const std::vector<std::unique_ptr<Method>>& methods() const { return methods_; }
  // Whether a method declares this capability, e.g. any(&Capabilities::changes_shapes).
  bool any(bool Capabilities::* flag) const;
  // Whether a method with this capability acts at `event` now, e.g. whether the coming Reconfigure
  // reshapes: acts_now(Event::Reconfigure, ctx, &Capabilities::changes_shapes).
  bool acts_now(Event event, const TrainContext& ctx, bool Capabilities::* flag) const;
  bool empty() const { return methods_.empty(); }
  // Largest prefix served from cached activations by any method.
  int cached_prefix_blocks() const;
  // The one method's step plan (Method::step_plan) for a run of `horizon` steps; empty when none
  // has one.
  std::optional<StepPlan> step_plan(int64_t horizon) const;

  nlohmann::json save_state() const;              // {name: state}
  // The state a checkpoint saved (`checkpoint`: its directory, for messages). Throws when a saved
  // method is not enabled, or when an enabled one has no state there and cannot start mid-run
  // (Method::cannot_start_mid_run); returns the names of the enabled methods that start now.
  std::vector<std::string> load_state(const nlohmann::json& state, const std::string& checkpoint);
  // Every method's state tensors, named "<method>/<tensor>"; and back (before load_state).
  Method::StateTensors state_tensors() const;
  void load_state_tensors(std::map<std::string, std::vector<float>> tensors);
  // Every method's restore_trained_function (Method), in order: its non-empty lines, each
  // headed "methods.<name>: ".
  std::vector<std::string> restore_trained_function(TrainContext& ctx);
  // Every method's unfinished_at_end (Method): its non-empty lines, headed the same way.
  std::vector<std::string> unfinished_at_end() const;
  // How often each event was fired (for tests and debugging).
  const std::array<int64_t, kNumEvents>& event_counts() const { return counts_; }

 private:
  Method& saved_method(const std::string& name);  // throws when a checkpoint's method is not enabled
  std::vector<std::unique_ptr<Method>> methods_;
  std::array<int64_t, kNumEvents> counts_{};
};

}  // namespace frugal
