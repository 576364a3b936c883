// Wall-clock timing helpers and the median used by every benchmark.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace frugal {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Wall-clock milliseconds of one call of f.
inline double time_ms(const std::function<void()>& f) {
  Timer t;
  f();
  return t.ms();
}

// Median of a sample (the mean of the two middle values for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0.0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace frugal
