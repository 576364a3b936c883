// Which keys each query of a self-attention may attend to: a small value type read by the
// attention kernels (forward, backward, decode, reference), the model (one pattern per layer) and
// the FLOP accounting. Every pattern is causal (key j <= query i) and always allows j == i, so no
// softmax row is empty. The Sparse Transformer patterns (Child et al. 2019) for Mixed Sparsity
// Training:
//   Causal                    every j <= i
//   Local   {window w}        i - w < j <= i
//   Strided {window w, s}     Local(w) or (i - j) % s == 0
//   Fixed   {block b, c}      same block (j / b == i / b) or j among the last c positions of its
//                             block (a "summary" column every later query sees)
// Besides allows(i, j), it answers in bulk what the tiled kernels need: the allowed keys of one
// query (or queries of one key) in a run of up to 64 positions as a bit mask, whether a tile is
// empty, full or partial, and the exact number of allowed pairs of a length-T sequence.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace frugal::kernels {

class AttentionPattern {
 public:
  enum class Kind { Causal, Local, Strided, Fixed, Bidirectional };
  // A rectangle of (query, key) pairs holds no allowed pair, only allowed pairs, or both.
  enum class Tile { Empty, Full, Partial };

  AttentionPattern() = default;  // Causal
  static AttentionPattern causal() { return {}; }
  static AttentionPattern bidirectional() { return {Kind::Bidirectional, 0, 0}; }
  // The constructors below throw frugal::Error on invalid parameters (w, s, b >= 1, 0 <= c <= b).
  static AttentionPattern local(int window);
  static AttentionPattern strided(int window, int stride);
  static AttentionPattern fixed(int block, int summary);

  Kind kind() const { return kind_; }
  int window() const { return a_; }   // Local, Strided
  int stride() const { return b_; }   // Strided
  int block() const { return a_; }    // Fixed
  int summary() const { return b_; }  // Fixed
  // Whether no query sees a later key (every kind but Bidirectional).
  bool is_causal() const { return kind_ != Kind::Bidirectional; }
  // "causal", "bidirectional", "local(w=16)", "strided(w=16,s=16)", "fixed(b=16,c=1)"
  std::string name() const;
  bool operator==(const AttentionPattern&) const = default;

  // May query i attend to key j?
  bool allows(int64_t i, int64_t j) const {
    if (kind_ == Kind::Bidirectional) return true;
    const int64_t d = i - j;
    if (d < 0) return false;
    switch (kind_) {
      case Kind::Local: return d < a_;
      case Kind::Strided: return d < a_ || d % b_ == 0;
      case Kind::Fixed: return j / a_ == i / a_ || j % a_ >= a_ - b_;
      default: return true;
    }
  }

  // Bit n (n < nk <= 64) set iff query i may attend to key k0 + n.
  uint64_t keys_of(int64_t i, int64_t k0, int nk) const {
    switch (kind_) {
      case Kind::Local: return span(i - a_ + 1, i + 1, k0, nk);
      case Kind::Strided: return span(i - a_ + 1, i + 1, k0, nk) | every(i, -b_, k0, nk);
      case Kind::Fixed: {
        uint64_t bits = span(i - i % a_, i + 1, k0, nk);  // i's own block up to i
        // summary columns [blk·b + b - c, blk·b + b) of the blocks before i's that meet the run
        const int64_t first = std::max<int64_t>(0, k0) / a_, own = i / a_;
        for (int64_t blk = first; blk < own && blk * a_ < k0 + nk; ++blk)
          bits |= span(blk * a_ + a_ - b_, blk * a_ + a_, k0, nk);
        return bits;
      }
      case Kind::Bidirectional: return span(0, k0 + nk, k0, nk);
      default: return span(0, i + 1, k0, nk);
    }
  }

  // Bit n (n < nq <= 64) set iff query q0 + n may attend to key j.
  uint64_t queries_of(int64_t j, int64_t q0, int nq) const {
    constexpr int64_t kAll = INT64_MAX / 2;
    switch (kind_) {
      case Kind::Local: return span(j, j + a_, q0, nq);
      case Kind::Strided: return span(j, j + a_, q0, nq) | every(j, b_, q0, nq);
      case Kind::Fixed:
        return span(j, j % a_ >= a_ - b_ ? kAll : j - j % a_ + a_, q0, nq);
      case Kind::Bidirectional: return span(0, q0 + nq, q0, nq);
      default: return span(j, kAll, q0, nq);
    }
  }

  // The largest i - j of any allowed pair: w - 1 for Local, b - 1 for Fixed without summary
  // columns, else kUnbounded (the causal kernels trim their products to this band).
  static constexpr int64_t kUnbounded = INT64_MAX / 4;
  int64_t max_distance() const {
    if (kind_ == Kind::Local || (kind_ == Kind::Fixed && b_ == 0)) return a_ - 1;
    return kUnbounded;
  }

  // Whether the tile of queries [q0, q1) and keys [k0, k1) holds allowed pairs (exact).
  Tile tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;

  // Number of allowed (i, j) pairs with 0 <= i, j < T (T(T+1)/2 for Causal, T² for Bidirectional).
  int64_t pairs(int64_t T) const;

 private:
  AttentionPattern(Kind kind, int a, int b) : kind_(kind), a_(a), b_(b) {}

  // Bits n < width of the positions p0 + n that lie in [lo, hi).
  static uint64_t span(int64_t lo, int64_t hi, int64_t p0, int width) {
    const int64_t from = std::max<int64_t>(lo - p0, 0), to = std::min<int64_t>(hi - p0, width);
    if (from >= to) return 0;
    const uint64_t below_to = to >= 64 ? ~uint64_t{0} : (uint64_t{1} << to) - 1;
    return below_to & ~((uint64_t{1} << from) - 1);
  }
  // Bits n < width of the positions p0 + n = start + m·step, m >= 0 (step may be negative).
  static uint64_t every(int64_t start, int64_t step, int64_t p0, int width) {
    const int64_t s = step < 0 ? -step : step;
    int64_t n = ((start - p0) % s + s) % s;  // first position >= p0 on start's residue class
    uint64_t bits = 0;
    for (; n < width; n += s)
      if ((p0 + n - start) * step >= 0) bits |= uint64_t{1} << n;
    return bits;
  }

  Kind kind_ = Kind::Causal;
  int a_ = 0, b_ = 0;  // Local: w; Strided: w, s; Fixed: b, c
};

}  // namespace frugal::kernels
