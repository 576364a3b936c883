// BatchLoader tests: sample layout, per-epoch permutations, determinism, bit-exact resume from
// state(), and sequential (evaluation) order.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <filesystem>

#include "frugal/core/error.h"
#include "frugal/data/loader.h"

namespace fs = std::filesystem;
using frugal::data::BatchLoader;
using frugal::data::LoaderOrder;
using frugal::data::LoaderState;
using frugal::data::TokenShard;

namespace {

// A shard whose token at position p is p % 1000, so every sample's contents are predictable.
std::shared_ptr<const TokenShard> make_shard(int64_t n) {
  // One directory per process: CTest runs the test cases of this file in parallel.
  const fs::path dir = fs::temp_directory_path() / ("frugal_test_loader_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i % 1000);
  const std::string path = (dir / ("shard_" + std::to_string(n) + ".bin")).string();
  frugal::data::write_shard(path, tokens, 1000);
  return std::make_shared<const TokenShard>(TokenShard::open(path));
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  std::vector<int64_t> ids;
  int rows = 0;
  bool operator==(const Batch&) const = default;
};

Batch next_batch(BatchLoader& loader, int B) {
  Batch b;
  b.inputs.assign(static_cast<size_t>(B) * loader.seq_len(), -1);
  b.targets.assign(b.inputs.size(), -1);
  b.ids.assign(B, -1);
  b.rows = loader.next(B, b.inputs.data(), b.targets.data(), b.ids.data());
  return b;
}

}  // namespace

TEST(Loader, SamplesAreShiftedWindows) {
  const auto shard = make_shard(1001);  // (1001 - 1) / 10 = 100 samples
  BatchLoader loader(shard, 10, LoaderOrder::Shuffled, 7);
  EXPECT_EQ(loader.num_samples(), 100);
  const Batch b = next_batch(loader, 4);
  ASSERT_EQ(b.rows, 4);
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(b.inputs[r * 10 + t], (b.ids[r] * 10 + t) % 1000);
      EXPECT_EQ(b.targets[r * 10 + t], (b.ids[r] * 10 + t + 1) % 1000);
    }
}

TEST(Loader, EachEpochIsAPermutationDependingOnSeedAndEpoch) {
  const auto shard = make_shard(3001);
  BatchLoader loader(shard, 30, LoaderOrder::Shuffled, 1);
  ASSERT_EQ(loader.num_samples(), 100);
  std::vector<int64_t> epoch0, epoch1;
  for (int i = 0; i < 25; ++i) {
    const Batch b = next_batch(loader, 4);
    epoch0.insert(epoch0.end(), b.ids.begin(), b.ids.end());
  }
  EXPECT_EQ(loader.state(), (LoaderState{0, 100}));
  for (int i = 0; i < 25; ++i) {
    const Batch b = next_batch(loader, 4);
    epoch1.insert(epoch1.end(), b.ids.begin(), b.ids.end());
  }
  EXPECT_EQ(loader.state(), (LoaderState{1, 100}));
  EXPECT_NE(epoch0, epoch1);
  for (auto* e : {&epoch0, &epoch1}) {
    std::vector<int64_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
  }
  EXPECT_EQ(loader.sample_at(0, 17), epoch0[17]);
  EXPECT_EQ(loader.sample_at(1, 42), epoch1[42]);
  BatchLoader other_seed(shard, 30, LoaderOrder::Shuffled, 2);
  EXPECT_NE(next_batch(other_seed, 8).ids, std::vector<int64_t>(epoch0.begin(), epoch0.begin() + 8));
}

TEST(Loader, ResumeFromStateIsBitExact) {
  const auto shard = make_shard(5000);
  BatchLoader straight(shard, 16, LoaderOrder::Shuffled, 42);  // 312 samples
  std::vector<Batch> expected;
  for (int i = 0; i < 100; ++i) expected.push_back(next_batch(straight, 7));  // crosses 2 epochs

  BatchLoader first(shard, 16, LoaderOrder::Shuffled, 42);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(next_batch(first, 7), expected[i]);
  const LoaderState saved = first.state();
  BatchLoader resumed(shard, 16, LoaderOrder::Shuffled, 42);
  resumed.restore(saved);
  for (int i = 60; i < 100; ++i) EXPECT_EQ(next_batch(resumed, 7), expected[i]) << "batch " << i;
  EXPECT_THROW(resumed.restore(LoaderState{0, 313}), frugal::Error);
}

TEST(Loader, SequentialVisitsAllSamplesOnceThenReportsDone) {
  const auto shard = make_shard(1001);
  BatchLoader loader(shard, 100, LoaderOrder::Sequential);  // 10 samples
  std::vector<int64_t> seen;
  while (!loader.done()) {
    const Batch b = next_batch(loader, 4);
    seen.insert(seen.end(), b.ids.begin(), b.ids.begin() + b.rows);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(next_batch(loader, 4).rows, 0);
  loader.reset();
  EXPECT_EQ(next_batch(loader, 4).ids, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Loader, TooShortShardIsAnError) {
  EXPECT_THROW(BatchLoader(make_shard(10), 10, LoaderOrder::Shuffled), frugal::Error);
}
