// The time budget's horizon and probes; see time_budget.h.
#include "frugal/train/time_budget.h"

#include <algorithm>

#include "frugal/core/error.h"

namespace frugal {

namespace {

int64_t span_start(const StepPlan& plan, size_t span) { return span == 0 ? 0 : plan.ends[span - 1]; }

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

}  // namespace

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
                       int64_t max_steps) {
  const auto fits = [&](int64_t horizon) { return seconds_of(plan(horizon), done, horizon, step_seconds) <= seconds; };
  if (done >= max_steps || fits(max_steps)) return std::max(done, max_steps);
  int64_t lo = done, hi = max_steps;  // fits(lo) (no step), !fits(hi)
  if (!fits(lo)) return done;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::optional<BudgetProbe> next_budget_probe(const StepPlan& plan, int64_t from, int steps,
                                             std::span<const double> timed) {
  for (size_t i = 0; i < plan.ends.size(); ++i) {
    const int kind = plan.kinds[i];
    if (is_timed(timed, kind)) continue;
    const int64_t first = std::max(from, span_start(plan, i) + 1);
    if (first + steps <= plan.ends[i] - 1) return BudgetProbe{first, kind};
  }
  return std::nullopt;
}

}  // namespace frugal
