// BatchLoader: fixed T+1 samples of a token set, per-epoch permutations from a counter-based RNG.
#include "frugal/data/loader.h"

#include <numeric>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"

namespace frugal::data {
namespace {

// Fisher-Yates permutation of [0, n) whose draws depend only on (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng rng(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[i], perm[static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1))]);
  return perm;
}

}  // namespace

BatchLoader::BatchLoader(std::shared_ptr<const TokenSet> tokens, int seq_len, LoaderOrder order, uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), order_(order), seed_(seed) {
  FRUGAL_CHECK(tokens_, "BatchLoader needs a token set");
  FRUGAL_CHECK(seq_len_ > 0, "sequence length must be positive, got {}", seq_len_);
  num_samples_ = tokens_->size() > 0 ? (tokens_->size() - 1) / seq_len_ : 0;
  FRUGAL_CHECK(num_samples_ > 0, "token shard '{}' has {} tokens, too few for one sample of {} "
               "tokens; use a shorter sequence length or more data", tokens_->name(),
               tokens_->size(), seq_len_ + 1);
}

void BatchLoader::make_permutation(uint64_t epoch) {
  if (perm_epoch_ == epoch) return;
  perm_ = epoch_permutation(num_samples_, seed_, epoch);
  perm_epoch_ = epoch;
}

int64_t BatchLoader::sample_at(uint64_t epoch, int64_t position) const {
  FRUGAL_CHECK(position >= 0 && position < num_samples_, "sample position {} is outside [0, {})",
               position, num_samples_);
  if (order_ == LoaderOrder::Sequential) return position;
  if (perm_epoch_ == epoch) return perm_[position];
  return epoch_permutation(num_samples_, seed_, epoch)[position];
}

void BatchLoader::sample(int64_t id, int32_t* inputs, int32_t* targets) const {
  FRUGAL_CHECK(id >= 0 && id < num_samples_, "sample id {} is outside [0, {})", id, num_samples_);
  const int64_t start = id * seq_len_;
  tokens_->read(start, seq_len_, inputs);
  tokens_->read(start + 1, seq_len_, targets);
}

int BatchLoader::next(int B, int32_t* inputs, int32_t* targets, int64_t* sample_ids) {
  int filled = 0;
  while (filled < B) {
    if (state_.position == num_samples_) {
      if (order_ == LoaderOrder::Sequential) break;
      ++state_.epoch;
      state_.position = 0;
    }
    int64_t id = state_.position;
    if (order_ == LoaderOrder::Shuffled) {
      make_permutation(state_.epoch);
      id = perm_[state_.position];
    }
    sample(id, inputs + static_cast<int64_t>(filled) * seq_len_, targets + static_cast<int64_t>(filled) * seq_len_);
    sample_ids[filled] = id;
    ++state_.position;
    ++filled;
  }
  return filled;
}

bool BatchLoader::done() const {
  return order_ == LoaderOrder::Sequential && state_.position == num_samples_;
}

void BatchLoader::restore(const LoaderState& state) {
  FRUGAL_CHECK(state.position >= 0 && state.position <= num_samples_, "loader state position {} "
               "is outside [0, {}]; the checkpoint belongs to different data or sequence length",
               state.position, num_samples_);
  FRUGAL_CHECK(order_ == LoaderOrder::Shuffled || state.epoch == 0, "a sequential loader has no "
               "epochs, got epoch {}", state.epoch);
  state_ = state;
}

}  // namespace frugal::data
