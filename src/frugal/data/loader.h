// BatchLoader: (input, target) batches from a token set (one shard or many read as one sequence).
//
// The set is cut into fixed samples of T+1 tokens: sample i = tokens[i*T, i*T + T + 1), so
// inputs are its first T tokens and targets its last T. A sample's contents depend only on its
// id. Shuffled order visits every sample once per epoch, in a permutation that is a pure function
// of (seed, epoch) (counter-based RNG), so (epoch, position) is the whole loader state and resume
// is bit-exact. Sequential order hands out samples 0, 1, ... once, for evaluation.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "frugal/data/shard.h"
#include "frugal/data/token_set.h"

namespace frugal::data {

enum class LoaderOrder { Shuffled, Sequential };

struct LoaderState {
  uint64_t epoch = 0;
  int64_t position = 0;  // samples of this epoch already handed out
  bool operator==(const LoaderState&) const = default;
};

class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const TokenSet> tokens, int seq_len, LoaderOrder order, uint64_t seed = 0);
  BatchLoader(std::shared_ptr<const TokenShard> shard, int seq_len, LoaderOrder order, uint64_t seed = 0)
      : BatchLoader(std::make_shared<const TokenSet>(std::move(shard)), seq_len, order, seed) {}

  int64_t num_samples() const { return num_samples_; }
  int seq_len() const { return seq_len_; }

  // Fills up to B rows: inputs (B,T), targets (B,T), sample_ids (B). Shuffled order always fills
  // B rows, moving to the next epoch as needed. Sequential order returns the rows filled, fewer
  // than B at the end and 0 once every sample was handed out (see done()).
  int next(int B, int32_t* inputs, int32_t* targets, int64_t* sample_ids);
  bool done() const;  // sequential: every sample handed out

  // inputs (T), targets (T) of one sample.
  void sample(int64_t id, int32_t* inputs, int32_t* targets) const;
  // The id of the sample at position `position` of epoch `epoch` (shuffled order).
  int64_t sample_at(uint64_t epoch, int64_t position) const;

  LoaderState state() const { return state_; }
  void restore(const LoaderState& state);
  void reset() { restore(LoaderState{}); }

 private:
  void make_permutation(uint64_t epoch);

  std::shared_ptr<const TokenSet> tokens_;
  int seq_len_;
  LoaderOrder order_;
  uint64_t seed_;
  int64_t num_samples_;
  LoaderState state_;
  std::vector<int64_t> perm_;  // permutation of the current epoch (shuffled order)
  uint64_t perm_epoch_ = UINT64_MAX;
};

}  // namespace frugal::data
