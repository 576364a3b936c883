// The time budget's arithmetic (train/time_budget.h): the horizon that fits the seconds left,
// checked against a naive scan over every horizon, for steps of one cost and for a V-cycle's
// levels, with and without the evaluations' time; the count of evaluations; the estimates of
// kinds not timed yet; and which steps a probe may time.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/core/error.h"
#include "frugal/methods/multilevel/vcycle.h"
#include "frugal/train/time_budget.h"

using namespace frugal;

namespace {

// A two-level V-cycle's plan: levels 1, 2, 1 over shares 0.05 / 0.65 / 0.30 of the horizon,
// level 2 estimated at 0.4 of level 1's step.
std::optional<StepPlan> vcycle_plan(int64_t horizon) {
  return StepPlan{multilevel::VCycleMethod::segment_ends({0.05, 0.65, 0.30}, horizon), {0, 1, 0}, {1.0, 0.4},
                  {"level 1", "level 2"}};
}

std::optional<StepPlan> no_plan(int64_t) { return std::nullopt; }

// The naive reference: the seconds of steps [done, horizon), step by step, and of the evaluations
// after counted steps first..horizon (each interval-th and the last), for every horizon.
int64_t scanned_horizon(const StepPlanFn& plan, int64_t done, double seconds, const std::vector<double>& step_seconds,
                        const EvalCost& evals, int64_t max_steps) {
  int64_t best = done;
  for (int64_t horizon = done; horizon <= max_steps; ++horizon) {
    const std::optional<StepPlan> p = plan(horizon);
    const auto kind = [&](int64_t step) { return p ? step_kind(*p, step) : 0; };
    double total = 0;
    for (int64_t step = done; step < horizon; ++step) total += step_seconds[kind(step)];
    for (int64_t counted = evals.first; counted <= horizon; ++counted)
      if (counted % evals.interval == 0 || counted == horizon) total += evals.ratio * step_seconds[kind(counted - 1)];
    if (total <= seconds) best = horizon;
  }
  return best;
}

const EvalCost kNoEvals{};

}  // namespace

TEST(TimeBudget, HorizonIsTheLargestThatFitsTheSecondsLeft) {
  const std::vector<double> uniform = {0.25};
  // Steps of one cost: the steps done plus the seconds left over the step's, whole steps only.
  EXPECT_EQ(budget_horizon(no_plan, 10, 100.0, uniform, kNoEvals, 1000000), 410);
  EXPECT_EQ(budget_horizon(no_plan, 10, 100.1, uniform, kNoEvals, 1000000), 410);
  EXPECT_EQ(budget_horizon(no_plan, 10, 100.0, uniform, kNoEvals, 300), 300);  // train.max_steps caps it
  EXPECT_EQ(budget_horizon(no_plan, 10, -5.0, uniform, kNoEvals, 300), 10);    // the budget is spent
  EXPECT_EQ(budget_horizon(no_plan, 10, 0.2, uniform, kNoEvals, 300), 10);
  // A V-cycle's levels, level 2 at 0.4 of level 1's step: from the start, from inside level 2 and
  // from the last level-1 segment; the horizon is the naive scan's in every case.
  const std::vector<double> levels = {0.5, 0.2};
  for (int64_t done : {11, 40, 300, 380})
    for (double seconds : {0.0, 3.05, 50.05, 119.95, 120.05, 140.05})  // never a sum of steps' seconds
      EXPECT_EQ(budget_horizon(vcycle_plan, done, seconds, levels, kNoEvals, 2000),
                scanned_horizon(vcycle_plan, done, seconds, levels, kNoEvals, 2000))
          << "done " << done << ", " << seconds << " s left";
  // From step 0, 120.05 s are 0.35·N steps of 0.5 s and 0.65·N of 0.2 s: N = 120.05 / 0.305 → 393.
  EXPECT_EQ(budget_horizon(vcycle_plan, 0, 120.05, levels, kNoEvals, 2000), 393);
  // Had every step been level 1's, 240 steps: the plan is what makes the V-cycle's run longer.
  EXPECT_EQ(budget_horizon(no_plan, 0, 120.05, levels, kNoEvals, 2000), 240);
}

// Evaluations follow every interval-th step and the last; the budget holds them, each a multiple of
// the step of the kind it follows, and its horizon is the naive scan's.
TEST(TimeBudget, TheHorizonLeavesTimeForTheEvaluations) {
  for (int64_t interval : {1, 3, 10})
    for (int64_t first = 1; first <= 25; ++first)
      for (int64_t horizon = 0; horizon <= 40; ++horizon) {
        int64_t counted = 0;
        for (int64_t s = first; s <= horizon; ++s) counted += s % interval == 0 || s == horizon;
        EXPECT_EQ(evaluations_between(first, horizon, interval), counted)
            << "first " << first << ", horizon " << horizon << ", interval " << interval;
      }
  // Steps of 0.25 s, an evaluation of 2 s (ratio 8) every 100 steps: 100 s after step 10 hold 368
  // steps (92 s) and 4 evaluations, after steps 100, 200, 300 and the last, 378 (8 s); without the
  // evaluations they would hold 400 steps, to 410.
  const std::vector<double> uniform = {0.25};
  const EvalCost evals{100, 10, 8.0};  // the evaluation after step 10 is still to come
  const int64_t n = budget_horizon(no_plan, 10, 100.0, uniform, evals, 1000000);
  EXPECT_EQ(n, scanned_horizon(no_plan, 10, 100.0, uniform, evals, 2000));
  EXPECT_EQ(n, 378);
  // A V-cycle: evaluations on level 2 cost as much less as its steps do.
  const std::vector<double> levels = {0.5, 0.2};
  for (int64_t done : {11, 40, 300, 380})
    for (double seconds : {0.0, 3.05, 50.05, 119.95, 120.05, 140.05})
      for (const EvalCost& e : {EvalCost{50, done, 4.0}, EvalCost{7, done + 1, 0.5}})
        EXPECT_EQ(budget_horizon(vcycle_plan, done, seconds, levels, e, 2000),
                  scanned_horizon(vcycle_plan, done, seconds, levels, e, 2000))
            << "done " << done << ", " << seconds << " s left, interval " << e.interval;
}

TEST(TimeBudget, KindsNotTimedAreEstimatedFromATimedOne) {
  const StepPlan plan = *vcycle_plan(100);
  const auto expect_seconds = [&](std::vector<double> timed, std::vector<double> expected) {
    const std::vector<double> seconds = kind_seconds(plan, timed);
    ASSERT_EQ(seconds.size(), expected.size());
    for (size_t k = 0; k < seconds.size(); ++k) EXPECT_DOUBLE_EQ(seconds[k], expected[k]) << "kind " << k;
  };
  expect_seconds({0.5}, {0.5, 0.2});       // level 2 at 0.4 of level 1
  expect_seconds({0.5, 0.3}, {0.5, 0.3});  // both timed
  expect_seconds({0.0, 0.3}, {0.75, 0.3}); // level 1 from level 2's time
  EXPECT_THROW(kind_seconds(plan, std::vector<double>{}), Error);
  EXPECT_EQ(step_kind(plan, 4), 0);
  EXPECT_EQ(step_kind(plan, 5), 1);
  EXPECT_EQ(step_kind(plan, 69), 1);
  EXPECT_EQ(step_kind(plan, 70), 0);
  EXPECT_EQ(step_kind(plan, 100), 0);
}

TEST(TimeBudget, ProbesTimeEachKindInsideItsSpan) {
  const StepPlan plan = *vcycle_plan(100);  // level 1: steps 0-4, level 2: 5-69, level 1: 70-99
  // Level 1 timed: level 2 from its second step, and never its last (69).
  EXPECT_EQ(next_budget_probe(plan, 3, 10, std::vector<double>{0.5})->first, 6);
  EXPECT_EQ(next_budget_probe(plan, 3, 10, std::vector<double>{0.5})->kind, 1);
  EXPECT_EQ(next_budget_probe(plan, 30, 10, std::vector<double>{0.5})->first, 30);
  EXPECT_EQ(next_budget_probe(plan, 59, 10, std::vector<double>{0.5})->first, 59);
  EXPECT_FALSE(next_budget_probe(plan, 60, 10, std::vector<double>{0.5}));  // would reach step 69
  EXPECT_FALSE(next_budget_probe(plan, 3, 10, std::vector<double>{0.5, 0.2}));  // every kind timed
  // Level 1 not timed (a resume of an old checkpoint): its first span is too short for 10 steps,
  // so the probe waits for the last one.
  EXPECT_EQ(next_budget_probe(plan, 1, 10, std::vector<double>{0.0, 0.2})->first, 71);
  EXPECT_EQ(next_budget_probe(plan, 1, 2, std::vector<double>{0.0, 0.2})->first, 1);
}

// A re-timing's window is steady inside one span only, without the span's first and last steps;
// past the plan, and without a plan, every window is.
TEST(TimeBudget, SteadyStepsLieInsideOneSpanOfTheirKind) {
  const std::optional<StepPlan> plan = vcycle_plan(100);  // level 1: steps 0-4, level 2: 5-69, level 1: 70-99
  EXPECT_TRUE(steady_steps(plan, 1, 3));
  EXPECT_FALSE(steady_steps(plan, 0, 3));    // the run's first step
  EXPECT_FALSE(steady_steps(plan, 1, 4));    // level 1's last: the change to level 2
  EXPECT_FALSE(steady_steps(plan, 3, 8));    // across the change
  EXPECT_FALSE(steady_steps(plan, 5, 20));   // level 2's first: its kernels
  EXPECT_TRUE(steady_steps(plan, 6, 68));
  EXPECT_FALSE(steady_steps(plan, 6, 69));
  EXPECT_TRUE(steady_steps(plan, 71, 98));
  EXPECT_FALSE(steady_steps(plan, 71, 99));  // the horizon's last step ends the span too
  EXPECT_TRUE(steady_steps(plan, 120, 130));  // beyond the plan (a horizon fixed again lower)
  EXPECT_TRUE(steady_steps(std::nullopt, 0, 1000));
}

// A kind timed again scales every timed kind by its factor; a kind not timed stays 0 (estimated).
TEST(TimeBudget, RetimingScalesEveryTimedKindAlike) {
  const std::vector<double> seconds = retimed(std::vector<double>{0.5, 0.2, 0.0}, 1, 0.25);
  ASSERT_EQ(seconds.size(), 3u);
  EXPECT_DOUBLE_EQ(seconds[0], 0.625);
  EXPECT_DOUBLE_EQ(seconds[1], 0.25);
  EXPECT_EQ(seconds[2], 0.0);
  EXPECT_THROW(retimed(std::vector<double>{0.5, 0.0}, 1, 0.25), Error);  // kind 1 never timed
}
