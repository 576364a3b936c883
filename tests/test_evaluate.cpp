// evaluate_loss over the ranks of a process group: each rank runs its share of the batches and
// every rank gets the one-process result to the bit. The ranks are threads here, joined by an
// in-process ProcessGroup (the MPI one is exercised by tests/test_data_parallel.cpp).
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "frugal/data/prepare.h"
#include "frugal/train/evaluate.h"
#include "train_data.h"

namespace frugal {
namespace {

// N threads as the ranks of a group: allgather through shared memory and a barrier.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), sync_(n), slots_(n) {}
  class Rank final : public ProcessGroup {
   public:
    Rank(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.n_; }
    void barrier() override { g_.sync_.arrive_and_wait(); }
    void allgather(const double* in, size_t n, double* out) override {
      g_.slots_[rank_].assign(in, in + n);
      g_.sync_.arrive_and_wait();
      for (int r = 0; r < g_.n_; ++r) std::copy(g_.slots_[r].begin(), g_.slots_[r].end(), out + r * n);
      g_.sync_.arrive_and_wait();  // nobody overwrites a slot before everyone read it
    }

   private:
    ThreadGroup& g_;
    int rank_;
  };

 private:
  int n_;
  std::barrier<> sync_;
  std::vector<std::vector<double>> slots_;
};

TEST(EvaluateOverRanks, SplitsTheBatchesAndGivesTheOneProcessResultToTheBit) {
  testing::TempDir tmp;
  const std::string dir = testing::make_shakespeare_data(tmp, 60000);
  const auto tokenizer = data::load_prepared_tokenizer(dir);
  const auto val = data::open_prepared_split(dir, "val", *tokenizer);
  ModelConfig c;
  c.vocab_size = tokenizer->vocab_size();
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  auto evaluate = [&](ProcessGroup& group, int64_t batches) {
    GPT model(c);
    model.init_weights(5);
    data::BatchLoader loader(val, 32, data::LoaderOrder::Sequential);
    return evaluate_loss(model, loader, 3, batches, group);
  };
  for (int64_t batches : {int64_t{0}, int64_t{5}}) {  // 0: all, with a short last batch
    const EvalResult one = evaluate(single_process(), batches);
    for (int n : {2, 3}) {
      ThreadGroup group(n);
      std::vector<EvalResult> results(n);
      std::vector<std::thread> ranks;
      for (int r = 0; r < n; ++r)
        ranks.emplace_back([&, r] {
          ThreadGroup::Rank rank(group, r);
          results[r] = evaluate(rank, batches);
        });
      for (auto& t : ranks) t.join();
      int64_t run = 0;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(results[r].loss, one.loss) << n << " ranks, " << batches << " batches";
        EXPECT_EQ(results[r].tokens, one.tokens);
        EXPECT_EQ(results[r].sequences, one.sequences);
        EXPECT_EQ(results[r].batches, one.batches);
        // Rank r ran batches r, r + n, ...
        EXPECT_EQ(results[r].batches_run, (one.batches - r + n - 1) / n) << "rank " << r;
        run += results[r].batches_run;
      }
      EXPECT_EQ(run, one.batches);
      EXPECT_GE(one.batches, 5);
    }
  }
}

}  // namespace
}  // namespace frugal
