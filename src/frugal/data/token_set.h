// TokenSet: the token sequence a loader reads, made of one or more shards read as one
// concatenated sequence, or a range [begin, end) of it (a split of a sharded prepared directory:
// train is the front of the stream, val its last tokens). Windows may cross shard boundaries, so
// a set's samples are the same whichever way its tokens are cut into files.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/data/shard.h"

namespace frugal::data {

class TokenSet {
 public:
  // The concatenation of `shards` (all of one vocabulary), restricted to [begin, end) of it;
  // end = -1 means its last token. `name` says what it is in messages (e.g. "DIR: val").
  TokenSet(std::vector<std::shared_ptr<const TokenShard>> shards, std::string name,
           int64_t begin = 0, int64_t end = -1);
  explicit TokenSet(std::shared_ptr<const TokenShard> shard);  // one whole shard, named by its path

  int64_t size() const { return end_ - begin_; }
  int vocab_size() const { return vocab_size_; }
  const std::string& name() const { return name_; }
  const std::vector<std::shared_ptr<const TokenShard>>& shards() const { return shards_; }

  // out (n) = tokens [start, start + n) of the set, which must lie inside it.
  void read(int64_t start, int64_t n, int32_t* out) const;

 private:
  std::vector<std::shared_ptr<const TokenShard>> shards_;
  std::vector<int64_t> offsets_;  // (shards + 1) start of each shard in the concatenation
  std::string name_;
  int64_t begin_ = 0, end_ = 0;
  int vocab_size_ = 0;
};

}  // namespace frugal::data
