// train.budget = "seconds": the run's horizon from timed steps. Steps may differ in cost over the
// run (a method's StepPlan: the V-cycle's levels); the trainer times a few steps of each kind of
// step as the run reaches it and fixes the horizon again from what it has timed, estimating the
// kinds not timed yet from the plan's cost ratios; later it times the steps since the last fix
// again (train.budget_retime), so that the horizon follows a machine whose speed drifts. Pure
// functions, for the trainer and its tests.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "frugal/methods/method.h"

namespace frugal {

// The methods' plan of a run of a given horizon; empty when every step costs the same.
using StepPlanFn = std::function<std::optional<StepPlan>(int64_t horizon)>;

// The kind of step `step` of `plan` (0 beyond its last span).
int step_kind(const StepPlan& plan, int64_t step);

// Whether kind `kind` has been timed: timed[kind] holds its step's seconds (absent or 0: not yet).
inline bool is_timed(std::span<const double> timed, size_t kind) { return kind < timed.size() && timed[kind] > 0; }

// The seconds of a step of each kind of `plan`: timed[k] where kind k was timed (> 0), else from
// the first timed kind j as timed[j] · estimated_cost[k] / estimated_cost[j]. Needs one timed kind.
std::vector<double> kind_seconds(const StepPlan& plan, std::span<const double> timed);

// The evaluations of a run that ends at `horizon` steps, from the one after step `first` on: one
// after every `interval`-th step and one after the last (the same when the horizon is a multiple).
// Counted steps are 1-based here, as in the logs; 0 when first > horizon.
int64_t evaluations_between(int64_t first, int64_t horizon, int64_t interval);

// The evaluations a budget counts: train.eval_interval, the first step whose evaluation is still to
// come, and one evaluation's seconds as a multiple of a step's of the kind just run (evaluations
// of a V-cycle's coarse level cost as much less as its steps do); ratio 0 leaves them out.
struct EvalCost {
  int64_t interval = 1;
  int64_t first = 1;
  double ratio = 0;
};

// The largest horizon N in [done, max_steps] whose steps [done, N) and evaluations (`evals`) fit in
// `seconds`, a step of kind k taking step_seconds[k] and plan(N) laying out the kinds (every step
// kind 0 when it has no plan). A plan's spans are shares of the horizon, and the evaluations only
// grow in number with it, so the time grows with N: bisection.
int64_t budget_horizon(const StepPlanFn& plan, int64_t done, double seconds, std::span<const double> step_seconds,
                       const EvalCost& evals, int64_t max_steps);

// The next steps to time: `steps` consecutive steps from `first`, of kind `kind`.
struct BudgetProbe {
  int64_t first = 0;
  int kind = 0;
};

// What a fix of the budget timed (on one rank): `steps` steps of kind `kind` from step `first` — the
// first time that kind is timed (a probe) or again (a re-timing) — or an evaluation.
struct BudgetTiming {
  enum class What { Probe, Retime, Evaluation };
  What what = What::Probe;
  int kind = 0;
  int64_t first = 0, steps = 0;
  double seconds = 0;
};

// Whether steps [first, last] (0-based) run at one kind's steady cost: inside one span of `plan`,
// neither its first step (the first at a new shape, which creates its kernels) nor its last (which
// runs the change of kind at its end). Every run of steps is steady without a plan.
bool steady_steps(const std::optional<StepPlan>& plan, int64_t first, int64_t last);

// train.budget_retime: the step seconds after kind `kind`'s steps were timed again at `per_step`
// seconds. The other timed kinds are scaled by the same factor: a machine that slows down slows
// every kind of step alike, and a kind not timed again keeps its share of the run.
std::vector<double> retimed(std::span<const double> timed, int kind, double per_step);
// The first probe at or after step `from` of a kind not timed yet (is_timed) whose `steps` steps
// are steady (steady_steps); empty when there is none.
std::optional<BudgetProbe> next_budget_probe(const StepPlan& plan, int64_t from, int steps,
                                             std::span<const double> timed);

}  // namespace frugal
