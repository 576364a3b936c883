// A tiny opt-in profiler: named scopes accumulate wall time when enabled (`frugal bench
// --profile`), and cost one branch when not. Not thread-safe by design: scopes are opened on the
// main thread around parallel kernels; one opened inside a parallel region is not counted.
#pragma once
#include <string>

namespace frugal::profile {

void enable(bool on);
bool enabled();
void reset();
// A table of scopes sorted by total time: name, calls, total ms, and the share of the time of
// scope `whole` (scopes nest, so the shares of all scopes add up to more than 100%).
std::string report(const std::string& whole);
// How many times scope `name` closed since the last reset() (0 if never).
long long calls(const std::string& name);

class Scope {
 public:
  explicit Scope(const char* name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  long long start_ns_;
};

}  // namespace frugal::profile

#define FRUGAL_PROFILE_CONCAT2(a, b) a##b
#define FRUGAL_PROFILE_CONCAT(a, b) FRUGAL_PROFILE_CONCAT2(a, b)
#define FRUGAL_PROFILE(name) ::frugal::profile::Scope FRUGAL_PROFILE_CONCAT(profile_scope_, __LINE__)(name)
