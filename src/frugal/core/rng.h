// Counter-based random numbers: every draw is a pure function of (seed, stream, counter), so any
// stream can be checkpointed as two integers and replayed bit-exactly on any thread count.
#pragma once
#include <cmath>
#include <cstdint>

namespace frugal {

// SplitMix64 finaliser: a strong 64-bit mixing function.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Stateless hash of (key, counter) to a uniform float in [0, 1).
inline float uniform_at(uint64_t key, uint64_t counter) {
  return static_cast<float>(mix64(key ^ mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

// A sequential stream: state is (key, counter); save both to resume.
struct Rng {
  uint64_t key = 0;
  uint64_t counter = 0;

  Rng() = default;
  Rng(uint64_t seed, uint64_t stream) : key(mix64(seed * 0x632BE59BD9B4E019ull + stream)) {}

  uint64_t next_u64() { return mix64(key ^ mix64(counter++)); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  // Standard normal (Box-Muller, one value per call so the stream position is simple).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace frugal
