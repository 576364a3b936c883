// AttentionPattern: parameter checks, names, tile classification and pair counts (closed forms per
// kind; see attention_pattern.h).
#include "frugal/kernels/attention_pattern.h"

#include <fmt/format.h>

#include "frugal/core/error.h"

namespace frugal::kernels {
namespace {

void check_positive(int value, const char* what, const char* kind) {
  FRUGAL_CHECK(value >= 1, "attention pattern {}: the {} must be at least 1 (got {})", kind, what,
               value);
}

}  // namespace

AttentionPattern AttentionPattern::local(int window) {
  check_positive(window, "window w", "local");
  return {Kind::Local, window, 0};
}

AttentionPattern AttentionPattern::strided(int window, int stride) {
  check_positive(window, "window w", "strided");
  check_positive(stride, "stride s", "strided");
  return {Kind::Strided, window, stride};
}

AttentionPattern AttentionPattern::fixed(int block, int summary) {
  check_positive(block, "block b", "fixed");
  FRUGAL_CHECK(summary >= 0 && summary <= block,
               "attention pattern fixed: the summary columns c must satisfy 0 <= c <= b (got b={} "
               "c={})",
               block, summary);
  return {Kind::Fixed, block, summary};
}

std::string AttentionPattern::name() const {
  switch (kind_) {
    case Kind::Local: return fmt::format("local(w={})", a_);
    case Kind::Strided: return fmt::format("strided(w={},s={})", a_, b_);
    case Kind::Fixed: return fmt::format("fixed(b={},c={})", a_, b_);
    case Kind::Bidirectional: return "bidirectional";
    default: return "causal";
  }
}

AttentionPattern::Tile AttentionPattern::tile(int64_t q0, int64_t q1, int64_t k0,
                                              int64_t k1) const {
  if (q0 >= q1 || k0 >= k1) return Tile::Empty;
  if (kind_ == Kind::Bidirectional) return Tile::Full;
  if (k0 >= q1) return Tile::Empty;  // no key j <= any query i
  if (kind_ == Kind::Fixed) {
    const int64_t b = a_, c = b_;
    // Key j sees the queries [j, end(j)), end(j) = infinity for a summary column, else the end of
    // j's block. Keys that may meet a query of the tile: [k0, jl], jl = min(k1, q1) - 1.
    const int64_t jl = std::min(k1, q1) - 1;
    const int64_t last_summary = jl % b >= b - c ? jl : jl - jl % b - 1;  // -1: none (c = 0 too)
    const bool any = jl >= q0 - q0 % b || (c > 0 && last_summary >= k0);
    if (!any) return Tile::Empty;
    // Full: every key precedes every query, and the keys [k0, before) ahead of the block of query
    // q1 - 1 are all summary columns (every column when c = b, else a tail of one block).
    const int64_t before = std::min(k1, (q1 - 1) - (q1 - 1) % b);
    const bool summaries = before <= k0 || c == b ||
                           (k0 / b == (before - 1) / b && k0 % b >= b - c);
    const bool all = k1 - 1 <= q0 && summaries;
    return all ? Tile::Full : Tile::Partial;
  }
  // Causal, Local and Strided depend on d = i - j only; the tile covers d in [dmin, dmax].
  const int64_t dmin = q0 - (k1 - 1), dmax = q1 - 1 - k0, lo = std::max<int64_t>(dmin, 0);
  const int64_t w = a_, s = b_;
  bool any = true, all = dmin >= 0;
  if (kind_ == Kind::Local) {
    any = lo < w;
    all = all && dmax < w;
  } else if (kind_ == Kind::Strided) {
    any = lo < w || (lo + s - 1) / s * s <= dmax;
    const int64_t lo_far = std::max(dmin, w);  // beyond the window only multiples of s count
    all = all && (lo_far > dmax || s == 1 || (lo_far == dmax && dmax % s == 0));
  }
  return !any ? Tile::Empty : all ? Tile::Full : Tile::Partial;
}

int64_t AttentionPattern::pairs(int64_t T) const {
  if (kind_ == Kind::Bidirectional) return T * T;
  int64_t n = 0;
  for (int64_t i = 0; i < T; ++i) switch (kind_) {
      case Kind::Local: n += std::min<int64_t>(i + 1, a_); break;
      case Kind::Strided:  // the window, then the multiples of s in [w, i]
        n += std::min<int64_t>(i + 1, a_) + (i >= a_ ? i / b_ - (a_ - 1) / b_ : 0);
        break;
      case Kind::Fixed: n += i % a_ + 1 + i / a_ * b_; break;  // own block, earlier summaries
      default: n += i + 1;
    }
  return n;
}

}  // namespace frugal::kernels
