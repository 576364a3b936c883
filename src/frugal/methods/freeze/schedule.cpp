// Freeze schedule and adaptive criterion; see schedule.h.
#include "frugal/methods/freeze/schedule.h"

#include <algorithm>
#include <cmath>

namespace frugal::freeze {

int frozen_by_schedule(int num_layers, double alpha, int interval_index) {
  if (interval_index <= 0 || alpha <= 0) return 0;
  const double fraction = 1.0 - std::pow(1.0 - alpha, interval_index);
  // The epsilon keeps exact products (e.g. 4 · 0.75) from rounding up to the next integer.
  return std::min(num_layers, static_cast<int>(std::ceil(num_layers * fraction - 1e-9)));
}

int frozen_by_gradient_change(const std::vector<double>& prev_norm, const std::vector<double>& norm,
                              int frozen) {
  const int L = static_cast<int>(norm.size());
  if (static_cast<int>(prev_norm.size()) != L || frozen >= L) return frozen;
  std::vector<double> delta(L, 0.0);
  for (int l = frozen; l < L; ++l) {
    if (!(prev_norm[l] > 0)) return frozen;  // no previous measurement
    delta[l] = std::fabs(prev_norm[l] - norm[l]) / prev_norm[l];
  }
  std::vector<double> active(delta.begin() + frozen, delta.end());
  std::sort(active.begin(), active.end());
  const size_t n = active.size();
  const double median = n % 2 ? active[n / 2] : 0.5 * (active[n / 2 - 1] + active[n / 2]);
  for (int l = frozen; l < L; ++l)
    if (delta[l] >= median) return l;
  return frozen;
}

}  // namespace frugal::freeze
