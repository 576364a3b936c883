// Finite-difference gradient checking in fp64, and the input and error helpers shared by the
// kernel and model tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "frugal/core/rng.h"

namespace frugal::testing {

// Central-difference estimate of d loss / d x[i] for every i, where loss() reads x.
inline std::vector<double> numeric_gradient(std::vector<double>& x,
                                            const std::function<double()>& loss,
                                            double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Largest |a-b| / max(1, |a|, |b|): relative where values are large, absolute where small.
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max({1.0, std::fabs(a[i]), std::fabs(b[i])});
    worst = std::max(worst, std::fabs(a[i] - b[i]) / scale);
  }
  return worst;
}

// max |a − b| / max |b| over n values: the error relative to the array's largest entry, so small
// entries (a softmax over many classes, a tiny gradient) still count, unlike max_rel_error.
template <class A, class B>
double max_error_rel_to_max(const A* a, const B* b, size_t n) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

// Deterministic pseudo-random values in [-scale, scale) for test inputs.
inline std::vector<double> random_vector(size_t n, unsigned seed, double scale = 1.0) {
  std::vector<double> v(n);
  unsigned long long s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return v;
}

// n unit normals as floats from the stream (seed, 1) of core/rng.h (kernel inputs).
inline std::vector<float> random_normal_floats(size_t n, uint64_t seed) {
  Rng rng(seed, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// Largest |got - want| relative to the scale sqrt(K) of a sum of K unit products (K < 1 counts
// as 1): the error measure of a product kernel against its fp64 reference.
inline double max_scaled_error(const std::vector<float>& got, const std::vector<double>& want, int K) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::sqrt(std::max(1.0, static_cast<double>(K))));
  return worst;
}

// fp64 <-> float copies, and the dot product a loss Σ out ⊙ R is made of.
inline std::vector<float> to_f(const std::vector<double>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace frugal::testing
