// The pure pieces of Mixed Sparsity Training (METHODS.md section 3; Hu, Li, Huang 2024): the
// sparsity-variation schedule, the drop fraction's cosine decay, Erdős–Rényi per-layer densities,
// the prune/grow counts of a topology update, random initial masks and the drop/grow step itself
// on one layer. No model, no optimizer: plugin.cpp applies them to the run.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace frugal::mst {

// Sparsity (fraction of zero weights over the masked linears) as a function of the step, in three
// phases over a run of max_steps:
//   warm-up              [0, warmup_end)         initial → peak, linear in the step
//   ultra-sparse hold    [warmup_end, restore)   peak
//   restoration          [restore, max_steps]    peak → final, linear in the step
// warmup_end = round(warmup_fraction·max_steps), restore = round(restore_fraction·max_steps).
struct SparsitySchedule {
  double initial = 0.0, peak = 0.9, final = 0.5;
  double warmup_fraction = 0.15, restore_fraction = 0.8;

  int64_t warmup_end(int64_t max_steps) const;
  int64_t restore_start(int64_t max_steps) const;
  double at(int64_t step, int64_t max_steps) const;
  // True for steps of the ultra-sparse hold, where hybrid sparse attention runs.
  bool in_hold(int64_t step, int64_t max_steps) const;
};

// RigL's cosine-decayed drop fraction ζ_t = ζ/2·(1 + cos(π·t/t_end)); 0 from t_end on.
double drop_fraction(double zeta, int64_t step, int64_t t_end);

// Per-layer densities for a global density over layers of shapes (OC, IC): Erdős–Rényi
// d_l = ε·(OC + IC)/(OC·IC) with ε solved so that Σ d_l·N_l = density·Σ N_l; layers whose d_l
// would exceed 1 are dense and ε is solved again over the others (repeated until none exceeds).
// `uniform` gives every layer the global density instead.
std::vector<double> layer_densities(std::span<const std::pair<int, int>> shapes, double density,
                                    bool uniform = false);

// Number of active weights a layer of n entries keeps at density d: round(d·n).
int64_t active_count(double density, int64_t n);

// Counts of one topology update of a layer with n entries, `active` of them active, to reach
// `target` active: n_prune = max(⌊active·ζ⌋, active − target), n_grow = n_prune − (active − target).
// Grown weights come from those inactive before the drop, so n_prune is capped at n − target
// (nothing can be regrown past a full layer).
struct UpdateCounts {
  int64_t prune = 0, grow = 0;
};
UpdateCounts update_counts(int64_t n, int64_t active, int64_t target, double zeta);

// A uniformly random 0/1 mask of n entries with exactly `active` ones (partial Fisher-Yates on a
// stream seeded by (seed, stream)).
std::vector<uint8_t> random_mask(int64_t n, int64_t active, uint64_t seed, uint64_t stream);

// The 0/1 mask of n = weight.size() entries keeping the `active` of largest |weight| (ties: lower
// index first): a layer's mask re-derived from weights that a reshape mapped to a new shape.
std::vector<uint8_t> magnitude_mask(std::span<const float> weight, int64_t active);

// One drop-and-grow step on a layer (RigL with MST's Mixed-Growing), in place on `mask`:
// - drop: the `counts.prune` active entries of smallest |weight| (ties: lower index first);
// - grow, among the entries inactive before the drop: `counts.grow − n_random` of largest
//   |grad| (ties: lower index first), then n_random = ⌊counts.grow·random_share⌋ uniformly at
//   random among the remaining candidates (stream (seed, stream)).
// Returns the dropped and the grown indices (the caller zeroes those weights and their moments).
struct UpdateResult {
  std::vector<int64_t> dropped, grown;
};
UpdateResult drop_and_grow(std::span<uint8_t> mask, std::span<const float> weight,
                           std::span<const float> grad, UpdateCounts counts, double random_share,
                           uint64_t seed, uint64_t stream);

}  // namespace frugal::mst
