// The pure pieces of Mixed Sparsity Training; see sparsity.h.
#include "frugal/methods/mst/sparsity.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"

namespace frugal::mst {

int64_t SparsitySchedule::warmup_end(int64_t max_steps) const {
  return std::llround(warmup_fraction * static_cast<double>(max_steps));
}

int64_t SparsitySchedule::restore_start(int64_t max_steps) const {
  return std::llround(restore_fraction * static_cast<double>(max_steps));
}

double SparsitySchedule::at(int64_t step, int64_t max_steps) const {
  const int64_t w = warmup_end(max_steps), r = restore_start(max_steps);
  if (step < w) return initial + (peak - initial) * static_cast<double>(step) / static_cast<double>(w);
  if (step < r || r >= max_steps) return peak;
  const double t = std::min(1.0, static_cast<double>(step - r) / static_cast<double>(max_steps - r));
  return peak + (final - peak) * t;
}

bool SparsitySchedule::in_hold(int64_t step, int64_t max_steps) const {
  return step >= warmup_end(max_steps) && step < restore_start(max_steps);
}

double drop_fraction(double zeta, int64_t step, int64_t t_end) {
  if (step >= t_end) return 0.0;
  return zeta / 2 * (1 + std::cos(std::numbers::pi * static_cast<double>(step) / static_cast<double>(t_end)));
}

std::vector<double> layer_densities(std::span<const std::pair<int, int>> shapes, double density,
                                    bool uniform) {
  const size_t L = shapes.size();
  std::vector<double> d(L, std::clamp(density, 0.0, 1.0));
  if (uniform || density <= 0 || density >= 1) return d;
  std::vector<double> n(L), raw(L);
  double total = 0;
  for (size_t l = 0; l < L; ++l) {
    const double oc = shapes[l].first, ic = shapes[l].second;
    n[l] = oc * ic;
    raw[l] = (oc + ic) / (oc * ic);
    total += n[l];
  }
  std::vector<bool> dense(L, false);
  for (;;) {  // each pass makes at least one more layer dense or stops: at most L passes
    double budget = density * total, weight = 0;
    for (size_t l = 0; l < L; ++l) {
      if (dense[l])
        budget -= n[l];
      else
        weight += raw[l] * n[l];
    }
    const double eps = weight > 0 ? budget / weight : 0.0;
    bool changed = false;
    for (size_t l = 0; l < L; ++l)
      if (!dense[l] && eps * raw[l] > 1) dense[l] = changed = true;
    if (changed) continue;
    for (size_t l = 0; l < L; ++l) d[l] = dense[l] ? 1.0 : eps * raw[l];
    return d;
  }
}

int64_t active_count(double density, int64_t n) {
  return std::clamp<int64_t>(std::llround(density * static_cast<double>(n)), 0, n);
}

UpdateCounts update_counts(int64_t n, int64_t active, int64_t target, double zeta) {
  FRUGAL_CHECK(active >= 0 && active <= n && target >= 0 && target <= n,
               "internal: mst update counts for {} active, {} target of {}", active, target, n);
  const int64_t shrink = active - target;
  int64_t prune = std::max(static_cast<int64_t>(std::floor(static_cast<double>(active) * zeta)), shrink);
  prune = std::clamp<int64_t>(prune, 0, std::min(active, n - target));
  return {prune, prune - shrink};
}

std::vector<uint8_t> random_mask(int64_t n, int64_t active, uint64_t seed, uint64_t stream) {
  std::vector<uint8_t> mask(static_cast<size_t>(n), 0);
  if (active >= n) {
    std::fill(mask.begin(), mask.end(), 1);
    return mask;
  }
  std::vector<uint32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0u);
  Rng rng(seed, stream);
  for (int64_t i = 0; i < active; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    std::swap(idx[i], idx[j]);
    mask[idx[i]] = 1;
  }
  return mask;
}

namespace {

// Moves the k entries of `pool` (ascending indices) with the smallest key(i) (ties: lower index
// first) into the result, ascending, and leaves the others in `pool`, still ascending.
template <class Key>
std::vector<int64_t> take_smallest(std::vector<int64_t>& pool, int64_t k, Key key) {
  std::vector<int64_t> taken;
  if (k <= 0) return taken;
  if (k >= static_cast<int64_t>(pool.size())) return std::exchange(pool, {});
  std::vector<float> keys(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) keys[i] = key(pool[i]);
  std::vector<float> sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end());
  const float threshold = sorted[static_cast<size_t>(k - 1)];
  int64_t below = 0;
  for (float v : keys) below += v < threshold;
  int64_t ties = k - below;  // entries equal to the threshold to take, lowest indices first
  std::vector<int64_t> rest;
  rest.reserve(pool.size() - static_cast<size_t>(k));
  taken.reserve(static_cast<size_t>(k));
  for (size_t i = 0; i < pool.size(); ++i) {
    const bool take = keys[i] < threshold || (keys[i] == threshold && ties-- > 0);
    (take ? taken : rest).push_back(pool[i]);
  }
  pool.swap(rest);
  return taken;
}

}  // namespace

std::vector<uint8_t> magnitude_mask(std::span<const float> weight, int64_t active) {
  std::vector<int64_t> all(weight.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  std::vector<uint8_t> mask(weight.size(), 0);
  for (int64_t i : take_smallest(all, active, [&](int64_t i) { return -std::fabs(weight[i]); })) mask[i] = 1;
  return mask;
}

UpdateResult drop_and_grow(std::span<uint8_t> mask, std::span<const float> weight,
                           std::span<const float> grad, UpdateCounts counts, double random_share,
                           uint64_t seed, uint64_t stream) {
  FRUGAL_CHECK(weight.size() == mask.size() && grad.size() == mask.size(),
               "internal: mst drop_and_grow on spans of {}, {} and {} entries", mask.size(), weight.size(), grad.size());
  std::vector<int64_t> active, inactive;
  for (size_t i = 0; i < mask.size(); ++i) (mask[i] ? active : inactive).push_back(static_cast<int64_t>(i));
  FRUGAL_CHECK(counts.prune <= static_cast<int64_t>(active.size()) && counts.grow <= static_cast<int64_t>(inactive.size()),
               "internal: mst update of {} prune / {} grow with {} active of {}", counts.prune, counts.grow,
               active.size(), mask.size());
  UpdateResult r;
  r.dropped = take_smallest(active, counts.prune, [&](int64_t i) { return std::fabs(weight[i]); });
  const int64_t n_random = static_cast<int64_t>(std::floor(static_cast<double>(counts.grow) * random_share));
  r.grown = take_smallest(inactive, counts.grow - n_random, [&](int64_t i) { return -std::fabs(grad[i]); });
  Rng rng(seed, stream);  // partial Fisher-Yates over the remaining candidates
  for (int64_t i = 0; i < n_random; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.below(inactive.size() - static_cast<uint64_t>(i)));
    std::swap(inactive[i], inactive[j]);
    r.grown.push_back(inactive[i]);
  }
  for (int64_t i : r.dropped) mask[i] = 0;
  for (int64_t i : r.grown) mask[i] = 1;
  return r;
}

}  // namespace frugal::mst
