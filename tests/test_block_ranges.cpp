// The model run as consecutive block ranges (what pipeline stages hold) against the whole model:
// per-range parameter tables, and bit-identical losses, gradients and AdamW training when the
// ranges are chained (forward: each range's output() into the next; backward: each range's
// input_grad() into the previous), with dropout, recomputation, a frozen prefix and gradient
// clipping (the global norm streamed through the ranges). Then whole-model GPTs that each execute
// one stage with several activation slots (what a pipeline rank runs), in GPipe and 1F1B orders,
// against one whole model running the micro-batches one after the other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/data/prepare.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"
#include "frugal/train/evaluate.h"
#include "train_data.h"

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
  const ParamTable tied_last = ParamTable::build(tied, {3, 4, false, true});
  const ParamInfo& copy = tied_last.at("transformer.wte.weight");
  // The first stage owns and updates wte: the last stage's copy has no AdamW moments.
  EXPECT_EQ(copy.offset, 0u);
  EXPECT_GE(tied_last.owned_begin(), copy.numel);
  EXPECT_EQ(tied_last.owned_begin(), tied_last.layer_range(3).first);
  EXPECT_EQ(AdamW(tied_last, {}).state_bytes(), 2 * sizeof(float) * (tied_last.total() - tied_last.owned_begin()));
  EXPECT_EQ(ParamTable::build(tied, {0, 1, true, false}).owned_begin(), 0u);
  EXPECT_EQ(last.owned_begin(), 0u);  // untied: nothing is a copy
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

namespace {

// ---- Stages with activation slots ----

constexpr int kM = 4;  // micro-batches per step

struct MicroBatch {
  std::vector<int32_t> tokens, targets;
  uint64_t key;
  std::vector<float> cached;  // the frozen prefix's output fed instead of running it (empty: none)
};

std::vector<MicroBatch> micro_batches(int vocab) {
  std::vector<MicroBatch> m;
  for (int i = 0; i < kM; ++i) m.push_back({random_tokens(30 + i, vocab), random_tokens(40 + i, vocab), mix64(100 + i), {}});
  return m;
}

// One whole model running the micro-batches one after the other (forward + backward each,
// accumulating): what the pipelines must reproduce. Returns the losses.
std::vector<float> run_sequentially(GPT& whole, const std::vector<MicroBatch>& mbs, int cached_blocks) {
  whole.zero_grad();
  std::vector<float> losses;
  for (const MicroBatch& m : mbs) {
    losses.push_back(whole.forward(m.tokens.data(), m.targets.data(), 1.0f / kM, m.key,
                                   m.cached.empty() ? nullptr : m.cached.data(), cached_blocks));
    whole.backward();
  }
  return losses;
}

// Two ranks of a two-stage pipeline: whole-model GPTs with the same weights, rank a executing
// blocks [0, k) with the embeddings, rank b blocks [k, L) with the head, each with `slots`
// activation slots. The ranks run one after the other here; what passes between them (a's
// output(), b's input_grad()) is read right when the schedule would send it.
struct TwoStages {
  GPT a, b;
  int k, cached_blocks;
  std::vector<float> losses = std::vector<float>(kM);

  TwoStages(const ModelConfig& c, int k, const std::vector<bool>& recompute, int slots, int frozen,
            int cached_blocks)
      : a(c), b(c), k(k), cached_blocks(cached_blocks) {
    for (GPT* g : {&a, &b}) {
      g->init_weights(7);
      g->set_frozen_prefix(frozen);
      g->zero_grad();
    }
    a.plan(kB, kT, recompute, {0, k, true, false}, slots);
    b.plan(kB, kT, recompute, {k, c.n_layer, false, true}, slots);
  }
  // Forward of micro-batch i on rank a into slot `slot`.
  void forward_a(const MicroBatch& m, int slot) {
    a.use_slot(slot);
    const GPT::RangeInput in = m.cached.empty() ? GPT::RangeInput{m.tokens.data()}
                                                : GPT::RangeInput{m.tokens.data(), m.cached.data(), cached_blocks};
    EXPECT_EQ(0.0f, a.forward_range(in, m.targets.data(), 1.0f / kM, m.key));
  }
  // Forward of micro-batch i on rank b into `slot`, from rank a's output of it (in a_slot).
  void forward_b(int i, const MicroBatch& m, int slot, int a_slot) {
    a.use_slot(a_slot);
    b.use_slot(slot);
    losses[i] = b.forward_range({nullptr, a.output(), k}, m.targets.data(), 1.0f / kM, m.key);
  }
  // Backward of one micro-batch on b, then on a from b's input gradient.
  void backward(int b_slot, int a_slot) {
    b.use_slot(b_slot);
    b.backward_range();
    a.use_slot(a_slot);
    a.backward_range(b.input_grad());
  }
};

enum class Schedule { GPipe, OneFOneB };

// Runs the micro-batches through two stages in `schedule`'s order: GPipe keeps all kM in flight
// (slot i), 1F1B at most 2 (slots reused round-robin).
TwoStages run_pipeline(const ModelConfig& c, int k, const std::vector<bool>& recompute, Schedule schedule,
                       const std::vector<MicroBatch>& mbs, int frozen = 0, int cached_blocks = 0) {
  if (schedule == Schedule::GPipe) {
    TwoStages p(c, k, recompute, kM, frozen, cached_blocks);
    for (int i = 0; i < kM; ++i) p.forward_a(mbs[i], i);
    for (int i = 0; i < kM; ++i) p.forward_b(i, mbs[i], i, i);
    for (int i = 0; i < kM; ++i) p.backward(i, i);
    return p;
  }
  TwoStages p(c, k, recompute, 2, frozen, cached_blocks);
  // a: F0, then F(i+1) B(i) for each i, B3; b: F(i) B(i)
  p.forward_a(mbs[0], 0);
  for (int i = 0; i < kM; ++i) {
    if (i + 1 < kM) p.forward_a(mbs[i + 1], (i + 1) % 2);
    p.forward_b(i, mbs[i], i % 2, i % 2);
    p.backward(i % 2, i % 2);
  }
  return p;
}

const char* name(Schedule s) { return s == Schedule::GPipe ? "GPipe" : "1F1B"; }

// a's gradients of [0, offset of block k) and b's of [offset of block k, total) against the whole
// model's, bit for bit; with a tied head the token embedding is compared apart (a's plus b's,
// added in another order than the whole model's, within a relative tolerance).
void expect_pipeline_gradients(GPT& whole, TwoStages& p, const std::string& what) {
  const size_t cut = whole.table().layer_range(p.k).first, total = whole.num_floats();
  const auto [wte_begin, wte_end] = whole.token_embedding_range();
  const bool tied = whole.config().tied_head;
  auto same = [&](const float* got, size_t begin, size_t end, const char* rank) {
    if (tied && begin <= wte_begin && wte_end <= end) {  // all but the token embedding
      EXPECT_EQ(0, std::memcmp(got + begin, whole.grads() + begin, (wte_begin - begin) * sizeof(float))) << rank << " " << what;
      EXPECT_EQ(0, std::memcmp(got + wte_end, whole.grads() + wte_end, (end - wte_end) * sizeof(float))) << rank << " " << what;
    } else {
      EXPECT_EQ(0, std::memcmp(got + begin, whole.grads() + begin, (end - begin) * sizeof(float))) << rank << " " << what;
    }
  };
  same(p.a.grads(), 0, cut, "first stage");
  same(p.b.grads(), cut, total, "last stage");
  if (!tied) return;
  double max_error = 0, max_grad = 0;
  for (size_t i = wte_begin; i < wte_end; ++i) {
    max_error = std::max(max_error, std::abs(double(p.a.grads()[i]) + p.b.grads()[i] - whole.grads()[i]));
    max_grad = std::max(max_grad, std::abs(double(whole.grads()[i])));
  }
  EXPECT_GT(max_grad, 0.0);
  EXPECT_LE(max_error, 1e-5 * max_grad) << what;
  // The head's part lives in b's copy only: b's token embedding gradient is not a's.
  EXPECT_NE(0, std::memcmp(p.a.grads() + wte_begin, p.b.grads() + wte_begin, (wte_end - wte_begin) * sizeof(float)));
}

}  // namespace

TEST(BlockRangeStages, GPipeAnd1F1BWithActivationSlotsGiveTheSequentialWholeModelBitForBit) {
  const ModelConfig c = untied_config();
  const auto mbs = micro_batches(c.vocab_size);
  // no recomputation, and one recomputed block in each stage
  for (const std::vector<bool>& recompute : {std::vector<bool>{}, std::vector<bool>{false, true, true, false}}) {
    GPT whole(c);
    whole.init_weights(7);
    whole.plan(kB, kT, recompute);
    const std::vector<float> losses = run_sequentially(whole, mbs, 0);
    for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
      const std::string what = std::string(name(schedule)) + (recompute.empty() ? "" : ", recompute");
      TwoStages p = run_pipeline(c, 2, recompute, schedule, mbs);
      EXPECT_EQ(losses, p.losses) << what;
      expect_pipeline_gradients(whole, p, what);
    }
  }
}

TEST(BlockRangeStages, TiedHeadGradientsAddUpToTheSequentialWholeModels) {
  ModelConfig c = untied_config();
  c.tied_head = true;
  const auto mbs = micro_batches(c.vocab_size);
  GPT whole(c);
  whole.init_weights(7);
  whole.plan(kB, kT);
  const std::vector<float> losses = run_sequentially(whole, mbs, 0);
  for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
    TwoStages p = run_pipeline(c, 2, {}, schedule, mbs);
    EXPECT_EQ(losses, p.losses) << name(schedule);
    expect_pipeline_gradients(whole, p, name(schedule));
  }
}

// A frozen prefix inside the first stage (1) or all of it (2), run from the tokens or fed the
// frozen blocks' output as a cached prefix (RangeInput::first_block = frozen).
TEST(BlockRangeStages, FrozenAndCachedPrefixInTheFirstStage) {
  const ModelConfig c = untied_config();
  for (int frozen : {1, 2}) {
    for (bool cached : {false, true}) {
      auto mbs = micro_batches(c.vocab_size);
      GPT whole(c);
      whole.init_weights(7);
      whole.set_frozen_prefix(frozen);
      whole.plan(kB, kT);
      if (cached)  // any activations will do; these are the frozen blocks' evaluation output
        for (MicroBatch& m : mbs) {
          whole.forward(m.tokens.data(), m.targets.data(), 0.0f);
          m.cached.assign(whole.block_output(frozen - 1), whole.block_output(frozen - 1) + kB * kT * c.n_embd);
        }
      const std::vector<float> losses = run_sequentially(whole, mbs, frozen);
      for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
        const std::string what = std::string(name(schedule)) + ", frozen " + std::to_string(frozen) +
                                 (cached ? ", cached" : "");
        TwoStages p = run_pipeline(c, 2, {}, schedule, mbs, frozen, cached ? frozen : 0);
        EXPECT_EQ(losses, p.losses) << what;
        expect_pipeline_gradients(whole, p, what);
        EXPECT_EQ(frozen < 2, p.b.input_grad() != nullptr) << what;
      }
    }
  }
}

TEST(BlockRangeStages, PlansAreCheckedAndHoldTheStagesActivationsPerSlot) {
  const ModelConfig c = untied_config();
  const std::vector<bool> recompute = {false, false, true, false};
  const BlockRange whole_range = BlockRange::whole(c), last{2, 4, false, true};
  GPT g(c);
  g.plan(kB, kT, recompute, last, 3);
  EXPECT_EQ(last, g.stage());
  EXPECT_EQ(3, g.slots());
  EXPECT_EQ(0, g.slot());
  EXPECT_EQ(recompute, g.recompute());
  EXPECT_FALSE(g.planned_whole(kB, kT));
  const MemoryPlan one = GPT::estimate_memory(c, kB, kT, recompute, whole_range, last, 1);
  EXPECT_EQ(3 * one.activations, g.memory_plan().activations);
  EXPECT_EQ(one.scratch, g.memory_plan().scratch);  // the backward scratch is shared
  EXPECT_EQ(GPT::estimate_memory(c, kB, kT, recompute).parameters, g.memory_plan().parameters);
  EXPECT_LT(one.activations, GPT::estimate_memory(c, kB, kT, recompute).activations);
  g.use_slot(2);
  EXPECT_EQ(2, g.slot());
  EXPECT_THROW(g.use_slot(3), Error);
  EXPECT_THROW(g.forward(random_tokens(1, 50).data(), random_tokens(2, 50).data(), 1.0f), Error);
  // plan(B, T) is the whole range with one slot, keeping nothing of the stage
  g.plan(kB, kT, recompute);
  EXPECT_EQ(whole_range, g.stage());
  EXPECT_EQ(1, g.slots());
  EXPECT_TRUE(g.planned_whole(kB, kT));
  EXPECT_FALSE(g.planned_whole(kB, kT - 1));
  EXPECT_EQ(GPT::estimate_memory(c, kB, kT, recompute).activations, g.memory_plan().activations);
  EXPECT_THROW(g.plan(kB, kT, {}, {1, 3, true, false}, 1), Error);   // embeddings need block 0
  EXPECT_THROW(g.plan(kB, kT, {}, {0, 3, false, true}, 1), Error);   // the head needs the last block
  EXPECT_THROW(g.plan(kB, kT, {}, {2, 2, false, false}, 1), Error);  // no block
  EXPECT_THROW(g.plan(kB, kT, {}, last, 0), Error);
  GPT range(c, {0, 2, true, false});
  EXPECT_THROW(range.plan(kB, kT, {}, {1, 3, false, false}, 1), Error);  // outside the range
  EXPECT_THROW(range.plan(kB, kT, {}, {1, 2, false, true}, 1), Error);   // the range has no head
  range.plan(kB, kT, {}, {1, 2, false, false}, 2);
  EXPECT_EQ(GPT::estimate_memory(c, kB, kT, {}, {0, 2, true, false}, {1, 2, false, false}, 2).activations,
            range.memory_plan().activations);
}

// evaluate_loss and logits on a model last planned for a stage and several slots (with the same
// B and T) re-plan it for the whole model, keeping its recompute policy, and give a freshly
// planned model's numbers.
TEST(BlockRangeStages, EvaluationAndLogitsReplanAStagePlannedModel) {
  frugal::testing::TempDir tmp;
  const std::string dir = frugal::testing::make_shakespeare_data(tmp, 20000);
  const auto tokenizer = data::load_prepared_tokenizer(dir);
  const auto val = data::open_prepared_split(dir, "val", *tokenizer);
  ModelConfig c = untied_config();
  c.vocab_size = tokenizer->vocab_size();
  c.n_layer = 2;
  const std::vector<bool> recompute = {true, false};
  const int B = 3, T = c.block_size;
  auto evaluate = [&](GPT& model) {
    data::BatchLoader loader(val, T, data::LoaderOrder::Sequential);
    return evaluate_loss(model, loader, B, 3).loss;
  };
  GPT fresh(c), staged(c);
  fresh.init_weights(5);
  staged.init_weights(5);
  const double expected = evaluate(fresh);
  staged.plan(B, T, recompute, {0, 1, true, false}, 2);
  EXPECT_EQ(expected, evaluate(staged));
  EXPECT_TRUE(staged.planned_whole(B, T));
  EXPECT_EQ(recompute, staged.recompute());

  const std::vector<int32_t> tokens = random_tokens(5, c.vocab_size);  // kB x kT
  std::vector<float> want(size_t(kB) * kT * c.vocab_size), got(want.size());
  fresh.logits(tokens.data(), kB, kT, want.data());
  staged.plan(kB, kT, recompute, {1, 2, false, true}, 3);
  staged.logits(tokens.data(), kB, kT, got.data());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  EXPECT_TRUE(staged.planned_whole(kB, kT));
  EXPECT_EQ(recompute, staged.recompute());
}
