// The model run as consecutive block ranges (what pipeline stages hold) against the whole model:
// per-range parameter tables, and bit-identical losses, gradients and AdamW training when the
// ranges are chained (forward: each range's output() into the next; backward: each range's
// input_grad() into the previous), with dropout, recomputation, a frozen prefix and gradient
// clipping (the global norm streamed through the ranges).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"

using namespace frugal;

namespace {

ModelConfig untied_config() {
  ModelConfig c;
  c.vocab_size = 50;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.tied_head = false;
  c.dropout = 0.1f;
  return c;
}

constexpr int kB = 2, kT = 16;

std::vector<int32_t> random_tokens(uint64_t key, int vocab) {
  std::vector<int32_t> t(kB * kT);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(uniform_at(key, i) * vocab);
  return t;
}

// Copies every tensor of `stage` from the whole model, by name.
void copy_params(const GPT& whole, GPT& stage) {
  for (const ParamInfo& e : stage.table().entries()) {
    const ParamInfo& w = whole.table().at(e.name);
    ASSERT_EQ(w.numel, e.numel) << e.name;
    std::memcpy(stage.params() + e.offset, whole.params() + w.offset, e.numel * sizeof(float));
  }
}

// The whole model and the same model as consecutive ranges cut before each block of `cuts`.
struct Split {
  GPT whole;
  std::vector<std::unique_ptr<GPT>> stages;

  Split(const ModelConfig& c, const std::vector<int>& cuts, std::vector<bool> recompute = {})
      : whole(c) {
    whole.init_weights(7);
    whole.plan(kB, kT, recompute);
    std::vector<int> bounds = {0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(c.n_layer);
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      const BlockRange r{bounds[s], bounds[s + 1], s == 0, s + 2 == bounds.size()};
      stages.push_back(std::make_unique<GPT>(c, r));
      copy_params(whole, *stages.back());
      stages.back()->plan(kB, kT, recompute);
    }
  }
  void set_frozen_prefix(int k) {
    whole.set_frozen_prefix(k);
    for (auto& s : stages) s->set_frozen_prefix(k);
  }
  // One training forward + backward through the chained stages; returns the loss.
  float forward_backward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                         uint64_t key) {
    float loss = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      GPT& g = *stages[s];
      const GPT::RangeInput in = s == 0 ? GPT::RangeInput{tokens.data()}
                                        : GPT::RangeInput{nullptr, stages[s - 1]->output(), g.range().begin};
      loss = g.forward_range(in, targets.data(), 1.0f, key);
    }
    for (size_t s = stages.size(); s-- > 0;)
      stages[s]->backward_range(s + 1 == stages.size() ? nullptr : stages[s + 1]->input_grad());
    return loss;
  }
};

void expect_same_gradients(const GPT& whole, const GPT& stage) {
  for (const ParamInfo& e : stage.table().entries()) {
    const ParamInfo& w = whole.table().at(e.name);
    EXPECT_EQ(0, std::memcmp(const_cast<GPT&>(stage).grads() + e.offset,
                             const_cast<GPT&>(whole).grads() + w.offset, e.numel * sizeof(float)))
        << e.name << " in blocks [" << stage.range().begin << ", " << stage.range().end << ")";
  }
}

}  // namespace

TEST(BlockRanges, TablesHoldOnlyTheirRangeAndTogetherTheWholeModel) {
  const ModelConfig c = untied_config();
  const ParamTable whole = ParamTable::build(c);
  const ParamTable first = ParamTable::build(c, {0, 1, true, false});
  const ParamTable middle = ParamTable::build(c, {1, 3, false, false});
  const ParamTable last = ParamTable::build(c, {3, 4, false, true});
  std::vector<std::string> names;
  for (const ParamTable* t : {&first, &middle, &last})
    for (const ParamInfo& e : t->entries()) names.push_back(e.name);
  std::vector<std::string> expected;
  for (const ParamInfo& e : whole.entries()) expected.push_back(e.name);
  EXPECT_EQ(names, expected);
  EXPECT_TRUE(middle.find("transformer.h.1.ln_1.weight"));
  EXPECT_FALSE(middle.find("transformer.h.0.ln_1.weight"));
  EXPECT_FALSE(middle.find("transformer.wte.weight"));
  EXPECT_LT(middle.total() + first.total() + last.total(), whole.total() + 1);
  // A tied head without the embeddings holds its own copy of the token embedding.
  ModelConfig tied = c;
  tied.tied_head = true;
  EXPECT_TRUE(ParamTable::build(tied, {3, 4, false, true}).find("transformer.wte.weight"));
  EXPECT_THROW(ParamTable::build(c, {1, 4, true, true}), Error);   // embeddings need block 0
  EXPECT_THROW(ParamTable::build(c, {0, 3, false, true}), Error);  // the head needs the last block
  EXPECT_THROW(ParamTable::build(c, {2, 2, false, false}), Error); // holds nothing
}

TEST(BlockRanges, ChainedRangesGiveTheWholeModelsLossAndGradientsBitForBit) {
  for (const std::vector<int>& cuts : {std::vector<int>{2}, std::vector<int>{1, 3}}) {
    for (bool recompute : {false, true}) {
      Split split(untied_config(), cuts, std::vector<bool>(4, recompute));
      const auto tokens = random_tokens(1, 50), targets = random_tokens(2, 50);
      split.whole.zero_grad();
      for (auto& s : split.stages) s->zero_grad();
      const float whole_loss = split.whole.forward(tokens.data(), targets.data(), 1.0f, 99);
      split.whole.backward();
      const float split_loss = split.forward_backward(tokens, targets, 99);
      EXPECT_EQ(whole_loss, split_loss) << cuts.size() + 1 << " ranges, recompute " << recompute;
      for (auto& s : split.stages) expect_same_gradients(split.whole, *s);
    }
  }
}

// AdamW per range with gradient clipping: every range feeds its gradient slice into one stream of
// the global norm's sum of squares, in range order, and clips with the norm it gives.
TEST(BlockRanges, TrainingAsTwoRangesGivesTheSingleProcessLossesBitForBit) {
  for (int frozen : {0, 1, 3}) {
    const ModelConfig c = untied_config();
    Split split(c, {2});
    split.set_frozen_prefix(frozen);
    AdamWConfig oc;
    oc.grad_clip = 0.5f;  // below the gradient norm: clipping is active at every step
    AdamW whole_optim(split.whole.table(), oc);
    std::vector<std::unique_ptr<AdamW>> optims;
    for (auto& s : split.stages) optims.push_back(std::make_unique<AdamW>(s->table(), oc));
    for (int step = 0; step < 6; ++step) {
      const auto tokens = random_tokens(10 + step, 50), targets = random_tokens(20 + step, 50);
      const uint64_t key = mix64(step);
      split.whole.zero_grad();
      const float whole_loss = split.whole.forward(tokens.data(), targets.data(), 1.0f, key);
      split.whole.backward();
      const float whole_norm = whole_optim.step(split.whole.params(), split.whole.grads(),
                                                split.whole.trainable_begin(), 1e-2f);
      for (auto& s : split.stages) s->zero_grad();
      const float split_loss = split.forward_backward(tokens, targets, key);
      kernels::SumSquaresStream stream;
      for (size_t i = 0; i < split.stages.size(); ++i)
        optims[i]->feed_grad_norm(stream, split.stages[i]->grads(), split.stages[i]->trainable_begin());
      const float split_norm = static_cast<float>(std::sqrt(kernels::sum_squares_finish(stream)));
      for (size_t i = 0; i < split.stages.size(); ++i) {
        GPT& s = *split.stages[i];
        optims[i]->clip_to(s.grads(), s.trainable_begin(), split_norm);
        optims[i]->update(s.params(), s.grads(), s.trainable_begin(), 1e-2f);
      }
      ASSERT_EQ(whole_loss, split_loss) << "frozen " << frozen << " step " << step;
      ASSERT_EQ(whole_norm, split_norm) << "frozen " << frozen << " step " << step;
      ASSERT_GT(whole_norm, oc.grad_clip);
    }
    for (auto& s : split.stages)
      for (const ParamInfo& e : s->table().entries())
        ASSERT_EQ(0, std::memcmp(s->params() + e.offset, split.whole.params() + split.whole.table().at(e.name).offset,
                                 e.numel * sizeof(float))) << e.name << " after 6 steps, frozen " << frozen;
  }
}

// A tied head in the last range reads its own copy of wte: the forward is exact, and the copy's
// gradient (the head's part) plus the first range's (the embedding's part) is the whole model's
// up to the order of the additions (the pipeline strategy adds them).
TEST(BlockRanges, TiedHeadCopyGradientsAddUpToTheWholeModels) {
  ModelConfig c = untied_config();
  c.tied_head = true;
  c.dropout = 0.0f;
  Split split(c, {2});
  const auto tokens = random_tokens(3, 50), targets = random_tokens(4, 50);
  split.whole.zero_grad();
  for (auto& s : split.stages) s->zero_grad();
  const float whole_loss = split.whole.forward(tokens.data(), targets.data(), 1.0f);
  split.whole.backward();
  EXPECT_EQ(whole_loss, split.forward_backward(tokens, targets, 0));
  const size_t n = split.whole.table().at("transformer.wte.weight").numel;
  const float* whole = split.whole.grads() + split.whole.table().at("transformer.wte.weight").offset;
  const float* a = split.stages[0]->grads() + split.stages[0]->table().at("transformer.wte.weight").offset;
  const float* b = split.stages[1]->grads() + split.stages[1]->table().at("transformer.wte.weight").offset;
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(a[i] + b[i], whole[i], 1e-6f) << i;
}
