// The opt-in scope profiler; see profile.h.
#include "frugal/core/profile.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "frugal/core/error.h"

namespace frugal::profile {
namespace {

bool g_enabled = false;
struct Entry {
  long long ns = 0;
  long long calls = 0;
};
std::map<std::string, Entry>& table() {
  static std::map<std::string, Entry> t;
  return t;
}
long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void enable(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }
void reset() { table().clear(); }

std::string report(const std::string& whole) {
  std::vector<std::pair<std::string, Entry>> rows(table().begin(), table().end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const auto it = table().find(whole);
  FRUGAL_CHECK(it != table().end() && it->second.ns > 0, "internal: profile scope '{}' never ran", whole);
  const long long total = it->second.ns;
  std::string out = fmt::format("{:<28} {:>8} {:>11} {:>7}\n", "scope", "calls", "total ms", "share");
  for (const auto& [name, e] : rows)
    out += fmt::format("{:<28} {:>8} {:>11.2f} {:>6.1f}%\n", name, e.calls, e.ns / 1e6,
                       100.0 * e.ns / total);
  out += fmt::format("share = time in the scope / time in \"{}\"; scopes nest, so shares add up to "
                     "more than 100%\n", whole);
  return out;
}

long long calls(const std::string& name) {
  const auto it = table().find(name);
  return it == table().end() ? 0 : it->second.calls;
}

// A scope opened on a thread of a parallel region (GPT's frozen prefix runs samples in parallel)
// is not counted: the enclosing scope on the main thread holds its time.
Scope::Scope(const char* name)
    : name_(g_enabled && !omp_in_parallel() ? name : nullptr), start_ns_(name_ ? now_ns() : 0) {}

Scope::~Scope() {
  if (!name_) return;
  Entry& e = table()[name_];
  e.ns += now_ns() - start_ns_;
  ++e.calls;
}

}  // namespace frugal::profile
