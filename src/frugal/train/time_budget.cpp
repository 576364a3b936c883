// The time budget's horizon and probes; see time_budget.h.
#include "frugal/train/time_budget.h"

#include <algorithm>

#include "frugal/core/error.h"

namespace frugal {

namespace {

int64_t span_start(const StepPlan& plan, size_t span) { return span == 0 ? 0 : plan.ends[span - 1]; }

// Multiples of `interval` among the steps [lo, hi] (lo ≥ 1): the evaluations after them.
int64_t multiples_between(int64_t lo, int64_t hi, int64_t interval) {
  return hi < lo ? 0 : hi / interval - (lo - 1) / interval;
}

// Seconds of steps [done, horizon) as `plan` lays them out.
double seconds_of(const std::optional<StepPlan>& plan, int64_t done, int64_t horizon, std::span<const double> step_seconds) {
  if (!plan) return double(horizon - done) * step_seconds[0];
  double total = 0;
  for (size_t i = 0; i < plan->ends.size(); ++i) {
    const int64_t begin = std::max(span_start(*plan, i), done), end = std::min(plan->ends[i], horizon);
    if (end > begin) total += double(end - begin) * step_seconds[plan->kinds[i]];
  }
  return total;
}

// Seconds of the evaluations `evals` counts in a run of `horizon` steps, each after a step of its
// kind (the last step: the run's final evaluation); per span, not per evaluation (the uncapped
// horizon of a first fix can be huge).
double evaluation_seconds(const std::optional<StepPlan>& plan, int64_t horizon, const EvalCost& evals,
                          std::span<const double> step_seconds) {
  if (evals.ratio <= 0 || evals.first > horizon) return 0;
  const int64_t I = evals.interval;
  double total = horizon % I != 0 ? step_seconds[plan ? step_kind(*plan, horizon - 1) : 0] : 0;
  int64_t begin = 0;  // the counted steps after step index `begin` onwards: begin + 1, ...
  for (size_t i = 0; plan && i < plan->ends.size(); begin = plan->ends[i++])
    total += double(multiples_between(std::max(begin + 1, evals.first), std::min(plan->ends[i], horizon), I)) *
             step_seconds[plan->kinds[i]];
  total += double(multiples_between(std::max(begin + 1, evals.first), horizon, I)) * step_seconds[0];  // beyond the plan: kind 0
  return evals.ratio * total;
}

}  // namespace

int64_t evaluations_between(int64_t first, int64_t horizon, int64_t interval) {
  if (first > horizon) return 0;
  return multiples_between(first, horizon, interval) + (horizon % interval != 0 ? 1 : 0);
}

int step_kind(const StepPlan& plan, int64_t step) {
  const auto span = std::upper_bound(plan.ends.begin(), plan.ends.end(), step);
  return span == plan.ends.end() ? 0 : plan.kinds[span - plan.ends.begin()];
}

std::vector<double> kind_seconds(const StepPlan& plan, std::span<const double> timed) {
  const size_t kinds = plan.estimated_cost.size();
  size_t known = 0;
  while (known < kinds && !is_timed(timed, known)) ++known;
  FRUGAL_CHECK(known < kinds, "internal: no kind of step has been timed");
  std::vector<double> seconds(kinds);
  for (size_t k = 0; k < kinds; ++k)
    seconds[k] = is_timed(timed, k) ? timed[k] : timed[known] * plan.estimated_cost[k] / plan.estimated_cost[known];
  return seconds;
}

int64_t budget_horizon(const StepPlanFn& plan, int64_t done, double seconds, std::span<const double> step_seconds,
                       const EvalCost& evals, int64_t max_steps) {
  const auto fits = [&](int64_t horizon) {
    const std::optional<StepPlan> p = plan(horizon);
    return seconds_of(p, done, horizon, step_seconds) + evaluation_seconds(p, horizon, evals, step_seconds) <= seconds;
  };
  if (done >= max_steps || fits(max_steps)) return std::max(done, max_steps);
  int64_t lo = done, hi = max_steps;  // fits(lo) (no step), !fits(hi)
  if (!fits(lo)) return done;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

bool steady_steps(const std::optional<StepPlan>& plan, int64_t first, int64_t last) {
  if (!plan) return true;
  const size_t span = std::upper_bound(plan->ends.begin(), plan->ends.end(), first) - plan->ends.begin();
  if (span == plan->ends.size()) return true;  // beyond the plan: kind 0 to the end
  return first > span_start(*plan, span) && last < plan->ends[span] - 1;
}

std::vector<double> retimed(std::span<const double> timed, int kind, double per_step) {
  FRUGAL_CHECK(is_timed(timed, kind) && per_step > 0, "internal: re-timing kind {} of {} at {} s", kind, timed.size(),
               per_step);
  const double factor = per_step / timed[kind];
  std::vector<double> seconds(timed.begin(), timed.end());
  for (double& s : seconds) s *= factor;  // 0 (not timed) stays 0
  return seconds;
}

std::optional<BudgetProbe> next_budget_probe(const StepPlan& plan, int64_t from, int steps,
                                             std::span<const double> timed) {
  for (size_t i = 0; i < plan.ends.size(); ++i) {
    const int kind = plan.kinds[i];
    if (is_timed(timed, kind)) continue;
    const int64_t first = std::max(from, span_start(plan, i) + 1);
    if (first + steps <= plan.ends[i] - 1) return BudgetProbe{first, kind};  // steady_steps in span i
  }
  return std::nullopt;
}

}  // namespace frugal
