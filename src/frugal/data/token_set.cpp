// TokenSet: shards read as one token sequence (see token_set.h).
#include "frugal/data/token_set.h"

#include <algorithm>

#include "frugal/core/error.h"

namespace frugal::data {

TokenSet::TokenSet(std::vector<std::shared_ptr<const TokenShard>> shards, std::string name,
                   int64_t begin, int64_t end)
    : shards_(std::move(shards)), name_(std::move(name)) {
  FRUGAL_CHECK(!shards_.empty(), "{} has no token shards; prepare it with `frugal prepare`", name_);
  for (const auto& s : shards_) FRUGAL_CHECK(s, "{}: a shard is missing; this is a bug in the caller", name_);
  offsets_.push_back(0);
  vocab_size_ = shards_.front()->vocab_size();
  for (const auto& s : shards_) {
    FRUGAL_CHECK(s->vocab_size() == vocab_size_, "{}: shard {} holds ids of a {}-token vocabulary "
                 "but {} of a {}-token one; its shards come from different tokenizers, prepare "
                 "it again", name_, s->path(), s->vocab_size(), shards_.front()->path(), vocab_size_);
    offsets_.push_back(offsets_.back() + s->size());
  }
  if (end < 0) end = offsets_.back();
  FRUGAL_CHECK(0 <= begin && begin <= end && end <= offsets_.back(), "{}: token range [{}, {}) is "
               "outside its {} tokens; the manifest and its shards disagree, prepare it again",
               name_, begin, end, offsets_.back());
  begin_ = begin;
  end_ = end;
}

TokenSet::TokenSet(std::shared_ptr<const TokenShard> shard)
    : TokenSet(std::vector{shard}, shard ? shard->path() : std::string("token set")) {}

void TokenSet::read(int64_t start, int64_t n, int32_t* out) const {
  FRUGAL_CHECK(start >= 0 && n >= 0 && start + n <= size(), "reading tokens [{}, {}) of {}, which "
               "has {}; this is a bug in the caller", start, start + n, name_, size());
  int64_t pos = begin_ + start;
  // The shard holding pos: the last one starting at or before it.
  size_t k = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), pos) - offsets_.begin()) - 1;
  while (n > 0) {
    while (offsets_[k + 1] <= pos) ++k;  // skips empty shards
    const int64_t take = std::min(n, offsets_[k + 1] - pos);
    shards_[k]->read(pos - offsets_[k], take, out);
    out += take, pos += take, n -= take;
  }
}

}  // namespace frugal::data
