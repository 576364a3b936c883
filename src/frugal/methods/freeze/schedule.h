// Pure functions of progressive layer freezing (PipeTransformer, METHODS.md §2).
#pragma once
#include <vector>

namespace frugal::freeze {

// Frozen bottom blocks after the T-th freeze interval: ceil(L · (1 − (1 − α)^T)), for any L.
int frozen_by_schedule(int num_layers, double alpha, int interval_index);

// Adaptive criterion. prev_norm/norm: per-layer gradient norms of the previous and the current
// interval; layers [frozen, L) are active. Δ_l = |prev − cur| / prev; returns the first active
// layer whose Δ is at or above the median Δ of the active layers, i.e. the new frozen prefix
// (layers below it changed least). Returns `frozen` when there is nothing to compare.
int frozen_by_gradient_change(const std::vector<double>& prev_norm, const std::vector<double>& norm,
                              int frozen);

}  // namespace frugal::freeze
