// The method framework and the freeze method: pure schedule functions, exact event counts, freeze
// behaviour in a run (frozen weights bit-identical), resume mid-interval, every pair of registered
// methods together, and the FLOP accounting against hand-computed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "frugal/core/error.h"
#include "frugal/methods/freeze/schedule.h"
#include "frugal/methods/method_set.h"
#include "frugal/model/flops.h"
#include "frugal/train/trainer.h"
#include "error_of.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using frugal::testing::TempDir;
using frugal::testing::error_of;

namespace {

std::string make_data(const TempDir& dir) { return frugal::testing::make_shakespeare_data(dir, 40000); }

io::Config config(const std::string& data, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + out, "model.n_layer=4",
                                "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                                "train.batch_size=4", "train.max_steps=8", "train.eval_interval=4",
                                "train.eval_batches=2", "optim.warmup_steps=2", "sample.count=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", o);
}

}  // namespace

TEST(FreezeSchedule, FollowsTheFormulaForAnyDepth) {
  // L = 12, alpha = 1/3: ceil(12 (1 - (2/3)^T)) = 4, 7, 9, 10, 11, 11 (10.95) ...
  const int expect12[] = {0, 4, 7, 9, 10, 11, 11};
  for (int T = 0; T <= 6; ++T) EXPECT_EQ(freeze::frozen_by_schedule(12, 1.0 / 3, T), expect12[T]) << T;
  EXPECT_EQ(freeze::frozen_by_schedule(4, 0.5, 1), 2);
  EXPECT_EQ(freeze::frozen_by_schedule(4, 0.5, 2), 3);  // ceil(4 · 0.75) exactly 3, not 4
  EXPECT_EQ(freeze::frozen_by_schedule(5, 0.2, 1), 1);
  EXPECT_EQ(freeze::frozen_by_schedule(24, 0.5, 40), 24);
}

TEST(FreezeSchedule, AdaptiveFreezesUpToTheFirstLayerAtOrAboveTheMedianChange) {
  // changes: 0.05, 0.1, 0.5, 0.3 -> median of active {0.05,0.1,0.5,0.3} = 0.2; first >= 0.2: layer 2
  std::vector<double> prev = {1, 1, 1, 1}, cur = {0.95, 0.9, 0.5, 0.7};
  EXPECT_EQ(freeze::frozen_by_gradient_change(prev, cur, 0), 2);
  // only layers [1, 4) active: changes 0.1, 0.5, 0.3, median 0.3 -> layer 2
  EXPECT_EQ(freeze::frozen_by_gradient_change(prev, cur, 1), 2);
  EXPECT_EQ(freeze::frozen_by_gradient_change({}, cur, 1), 1) << "no previous interval: no change";
}

TEST(Methods, ExactEventCountsForARun) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"),
                   {"train.grad_accum=2", "methods.freeze.alpha=0.5", "methods.freeze.interval=3"}),
            {.quiet = true});
  t.fit();
  const auto& n = t.methods().event_counts();
  auto count = [&](Event e) { return n[static_cast<int>(e)]; };
  EXPECT_EQ(count(Event::Init), 1);
  EXPECT_EQ(count(Event::FitStart), 1);
  EXPECT_EQ(count(Event::BatchStart), 8);
  EXPECT_EQ(count(Event::BeforeForward), 16);
  EXPECT_EQ(count(Event::AfterForward), 16);
  EXPECT_EQ(count(Event::BeforeBackward), 16);
  EXPECT_EQ(count(Event::AfterBackward), 16);
  EXPECT_EQ(count(Event::AfterGradReduce), 8);
  EXPECT_EQ(count(Event::BeforeOptimStep), 8);
  EXPECT_EQ(count(Event::AfterOptimStep), 8);
  EXPECT_EQ(count(Event::Reconfigure), 2);  // after steps 3 (2 frozen) and 6 (3 frozen)
  EXPECT_EQ(count(Event::BatchEnd), 8);
  EXPECT_EQ(count(Event::Eval), 2);
  EXPECT_EQ(count(Event::Checkpoint), 1);
  EXPECT_EQ(count(Event::FitEnd), 1);
  EXPECT_EQ(t.model().frozen_prefix(), 3);
}

TEST(Methods, FrozenWeightsStayBitIdentical) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"), {"methods.freeze.frozen_layers=2"}), {.quiet = true});
  const GPT& m = t.model();
  const size_t frozen_end = m.table().layer_range(2).first;
  std::vector<float> before(m.params(), m.params() + m.num_floats());
  t.fit();
  for (size_t i = 0; i < frozen_end; ++i) ASSERT_EQ(m.params()[i], before[i]) << i;
  size_t changed = 0;
  for (size_t i = frozen_end; i < m.num_floats(); ++i) changed += m.params()[i] != before[i];
  EXPECT_GT(changed, (m.num_floats() - frozen_end) / 2);
}

TEST(Methods, FreezeResumesBitExactlyMidInterval) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::vector<std::string> freeze = {"methods.freeze.alpha=0.34", "methods.freeze.interval=3",
                                           "methods.freeze.adaptive=true"};
  Trainer straight(config(data, dir.file("a"), freeze), {.quiet = true});
  const FitResult all = straight.fit();
  auto with_ckpt = freeze;
  with_ckpt.push_back("train.checkpoint_interval=4");  // step 4: inside the second interval
  Trainer(config(data, dir.file("b"), with_ckpt), {.quiet = true}).fit();  // gone before the resume
  std::filesystem::remove_all(dir.file("b/checkpoints/step_00000008"));
  std::ofstream(dir.file("b/checkpoints/latest")) << "step_00000004\n";
  Trainer resumed(config(data, dir.file("b"), freeze), {.resume = dir.file("b"), .quiet = true});
  const FitResult rest = resumed.fit();
  ASSERT_EQ(rest.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rest.losses[i], all.losses[4 + i]) << "step " << 4 + i;
  EXPECT_EQ(resumed.model().frozen_prefix(), straight.model().frozen_prefix());
}

// A resume with a method the checkpoint was trained without: refused, saying why and what to do,
// for a method whose schedule is laid out from step 0 (mst, multilevel); started at the resumed
// step for one that can start there (freeze: the prefix is frozen from then on).
TEST(Methods, AResumeStartsOnlyTheAddedMethodsThatCanStartMidRun) {
  TempDir dir;
  const std::string data = make_data(dir), run = dir.file("run");
  std::vector<float> saved;  // the weights at the checkpoint (step 4)
  {
    Trainer first(config(data, run, {"train.max_steps=4"}), {.quiet = true});
    first.fit();
    saved.assign(first.model().params(), first.model().params() + first.model().num_floats());
  }
  const std::pair<std::string, std::string> added[] = {
      {"mst", "methods.mst={}"}, {"multilevel", "methods.multilevel.shares=0.25,0.5,0.25"}};
  for (const auto& [name, setting] : added) {
    const std::string msg = error_of([&] { Trainer(config(data, run, {setting}), {.resume = run, .quiet = true}); });
    for (const std::string& part : {"was trained without methods." + name + ", which cannot start mid-run: ",
                                    "remove the [methods." + name + "] table to resume",
                                    "--init-from " + run + "/checkpoints/step_00000004"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  Trainer resumed(config(data, run, {"methods.freeze.frozen_layers=2"}), {.resume = run, .quiet = true});
  EXPECT_EQ(resumed.fit().steps, 8);
  EXPECT_EQ(resumed.model().frozen_prefix(), 2);
  const size_t frozen = resumed.model().trainable_begin();
  ASSERT_GT(frozen, 0u);
  EXPECT_TRUE(std::equal(saved.begin(), saved.begin() + frozen, resumed.model().params()));
  EXPECT_FALSE(std::equal(saved.begin() + frozen, saved.end(), resumed.model().params() + frozen));
}

// Freezing every block with a tied head would train ln_f alone: refused, naming the key and the
// way out; with an untied head the head still trains, and it is allowed.
TEST(Methods, FreezingEveryBlockWithATiedHeadIsRefused) {
  for (const std::string key : {"frozen_layers", "max_frozen"}) {
    const std::string msg = error_of([&] { run_settings(config("", "x", {"methods.freeze." + key + "=4"})); });
    for (const std::string& part : {"methods.freeze." + key + " = 4 would freeze every block (model.n_layer = 4)",
                                    std::string("only ln_f would train; freeze at most 3 blocks, or set model.tied_head = false")})
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(run_settings(config("", "x", {"methods.freeze.frozen_layers=4", "model.tied_head=false"})));
  EXPECT_NO_THROW(run_settings(config("", "x", {"methods.freeze.frozen_layers=3"})));
}

TEST(Methods, EveryPairOfRegisteredMethodsTrains) {
  TempDir dir;
  const std::string data = make_data(dir);
  // Settings under which each method acts within the 3 steps (several defaults do nothing).
  const std::map<std::string, std::vector<std::string>> acting = {
      {"freeze", {"methods.freeze.frozen_layers=1", "methods.freeze.autocache=on"}},
      {"sparse24", {"methods.sparse24.mask_interval=1", "methods.sparse24.dense_finetune_fraction=0.34"}},
      {"multilevel", {"methods.multilevel.shares=0.34,0.33,0.33"}},
      {"mst", {"methods.mst.update_interval=1", "methods.mst.sparsity_initial=0.5", "methods.mst.warmup_fraction=0.34",
               "methods.mst.restore_fraction=0.67", "methods.mst.attention_window=4", "methods.mst.attention_stride=4"}}};
  const auto& all = registered_methods();
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i; j < all.size(); ++j) {
      const std::string pair = all[i].name + " + " + all[j].name;
      ASSERT_TRUE(acting.count(all[i].name) && acting.count(all[j].name)) << "add acting settings for " << pair;
      std::vector<std::string> enable = acting.at(all[i].name);
      enable.insert(enable.end(), acting.at(all[j].name).begin(), acting.at(all[j].name).end());
      enable.push_back("train.max_steps=3");
      auto lists = [](const MethodInfo& a, const MethodInfo& b) {
        return std::any_of(a.conflicts.begin(), a.conflicts.end(), [&](const auto& c) { return c.first == b.name; });
      };
      const bool declared = lists(all[i], all[j]) || lists(all[j], all[i]);
      const std::string out = dir.file(all[i].name + "_" + all[j].name);
      try {
        Trainer t(config(data, out, enable), {.quiet = true});
        const FitResult r = t.fit();
        EXPECT_FALSE(declared) << pair << " declare a conflict but trained";
        ASSERT_EQ(r.losses.size(), 3u) << pair;
        for (float l : r.losses) EXPECT_TRUE(std::isfinite(l)) << pair;
      } catch (const Error& e) {
        EXPECT_TRUE(declared) << pair << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("cannot be used together"), std::string::npos) << e.what();
      }
    }
}

TEST(Methods, UnknownMethodTableIsRejectedWithSuggestion) {
  try {
    io::Config::load(run_schema(), "", {"methods.freez.alpha=0.5"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("methods.freeze"), std::string::npos) << e.what();
  }
  // A misspelled method enabled with its defaults: named, with every method listed.
  try {
    io::Config::load(run_schema(), "", {"methods.sparse42={}"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown config section 'methods.sparse42' (--set methods.sparse42={}): "
                                         "the sections of [methods] are freeze, mst, multilevel, "
                                         "sparse24; did you mean 'methods.sparse24'?"),
              std::string::npos) << e.what();
  }
}

TEST(Flops, MatchHandComputedValuesForASmallConfig) {
  ModelConfig c;
  c.vocab_size = 10, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 4, c.tied_head = true;
  GPT model(c);
  const int B = 3, T = 4;
  const double N = B * T, C = 16, H = 64;
  // per block linears: qkv 3C·C + proj C·C + fc H·C + fcproj C·H = 768 + 256 + 1024 + 1024 MACs/row
  const double linear = 2 * N * (3 * C * C + C * C + H * C + C * H);
  const double attention = 2.0 * B * 2 * 8 * T * (T + 1);  // 2·B·NH·HS·T(T+1), HS = 8
  const double head = 2 * N * C * 10;
  StepFlops f = count_step_flops(model, B, T);
  EXPECT_DOUBLE_EQ(f.executed[1].forward, linear + attention);
  EXPECT_DOUBLE_EQ(f.executed[1].backward_input, linear + 2 * attention);
  EXPECT_DOUBLE_EQ(f.executed[1].backward_weight, linear);
  EXPECT_DOUBLE_EQ(f.executed[3].forward, head);
  EXPECT_DOUBLE_EQ(f.executed_total().model(), 2 * (3 * linear + 3 * attention) + 3 * head);
  // block params: ln 2·2C + qkv 3C·C+3C + proj C·C+C + fc H·C+H + fcproj C·H+C
  const double block_params = 4 * C + 3 * C * C + 3 * C + C * C + C + H * C + H + C * H + C;
  EXPECT_DOUBLE_EQ(f.executed[1].optimizer, 12 * block_params);

  model.set_frozen_prefix(1);  // block 0 and the tied embedding/head frozen
  f = count_step_flops(model, B, T);
  EXPECT_DOUBLE_EQ(f.executed[1].forward, linear + attention);
  EXPECT_DOUBLE_EQ(f.executed[1].backward_input + f.executed[1].backward_weight + f.executed[1].optimizer, 0);
  EXPECT_DOUBLE_EQ(f.executed[3].backward_weight, 0) << "the tied head freezes with the embedding";
  EXPECT_DOUBLE_EQ(f.dense_total().model(), 2 * (3 * linear + 3 * attention) + 3 * head);
  f = count_step_flops(model, B, T, 1);  // block 0 served from cache
  EXPECT_DOUBLE_EQ(f.executed[1].forward, 0);

  model.set_frozen_prefix(2);  // every block frozen: the head's input gradient still runs for ln_f
  f = count_step_flops(model, B, T);
  EXPECT_DOUBLE_EQ(f.executed[3].backward_input, head);
  EXPECT_DOUBLE_EQ(f.executed_total().model(), 2 * (linear + attention) + 2 * head);
}

// A block's attention term counts the pairs its AttentionPattern allows: 4·B·NH·HS·pairs(T)
// forward, twice that backward; the dense model keeps Causal attention.
TEST(Flops, AttentionFollowsTheBlockPattern) {
  ModelConfig c;
  c.vocab_size = 10, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 8;
  GPT model(c);
  const int B = 3, T = 8;
  const double N = B * T, C = 16, H = 64;
  const double linear = 2 * N * (3 * C * C + C * C + H * C + C * H);
  const double causal = 2.0 * B * 2 * 8 * T * (T + 1);  // 2·B·NH·HS·T(T+1), HS = 8
  const uint64_t version = model.prefix_format_version(2);
  model.set_attention_pattern(1, frugal::kernels::AttentionPattern::local(3));
  EXPECT_GT(model.prefix_format_version(2), version) << "a cached prefix must see the change";
  EXPECT_EQ(model.prefix_format_version(1), version);
  const double local = 4.0 * B * 2 * 8 * (1 + 2 + 3 * 6);  // Local(3): 1, 2, then 3 keys per query
  const StepFlops f = count_step_flops(model, B, T);
  EXPECT_DOUBLE_EQ(f.executed[1].forward, linear + causal);
  EXPECT_DOUBLE_EQ(f.executed[2].forward, linear + local);
  EXPECT_DOUBLE_EQ(f.executed[2].backward_input, linear + 2 * local);
  EXPECT_DOUBLE_EQ(f.dense[2].forward, linear + causal);
  EXPECT_DOUBLE_EQ(f.dense[2].backward_input, linear + 2 * causal);
}
