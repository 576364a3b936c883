// AdamW against hand-computed values: which tensor kinds take decoupled weight decay, global
// gradient-norm clipping (and the frozen prefix both leave alone), and the warm-up + cosine
// learning-rate schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "frugal/model/param_table.h"
#include "frugal/optim/adamw.h"
#include "frugal/train/run_config.h"
#include "error_of.h"

using namespace frugal;

namespace {

// Every tensor kind: biases, LayerNorm gains and biases, a gated MLP and an untied head.
ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 11, c.block_size = 4, c.n_layer = 2, c.n_head = 1, c.n_embd = 8;
  c.mlp = MlpKind::Swiglu, c.tied_head = false, c.bias = true;
  return c;
}

}  // namespace

// With zero gradients Adam's step is 0 / (0 + eps) = 0, so one update leaves exactly the decay:
// p ← p · (1 − lr·wd) = 1 · (1 − 0.5·0.4) = 0.8 on decaying tensors, p = 1 elsewhere.
TEST(AdamW, DecoupledDecayOnlyOnLinearWeightsEmbeddingsAndHead) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.lr = 0.5f, oc.weight_decay = 0.4f, oc.grad_clip = 0;
  AdamW optim(table, oc);
  std::vector<float> params(table.total(), 1.0f), grads(table.total(), 0.0f);
  optim.update(params.data(), grads.data(), 0, oc.lr);
  // Written out by hand rather than from ParamInfo::decays(), which this test checks.
  const std::vector<std::string> decaying = {
      "transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"};
  const std::vector<std::string> block_decaying = {"attn.c_attn.weight", "attn.c_proj.weight",
                                                   "mlp.c_fc.weight", "mlp.c_gate.weight",
                                                   "mlp.c_proj.weight"};
  size_t checked = 0;
  for (const ParamInfo& e : table.entries()) {
    bool decays = std::find(decaying.begin(), decaying.end(), e.name) != decaying.end();
    for (const std::string& suffix : block_decaying) decays |= e.name.ends_with(suffix);
    for (size_t i = 0; i < e.numel; ++i) ASSERT_EQ(params[e.offset + i], decays ? 0.8f : 1.0f) << e.name;
    checked += decays;
  }
  EXPECT_EQ(checked, 3u + 2 * block_decaying.size());
  EXPECT_EQ(table.entries().size(), checked + 2 * 9 + 2) << "5 biases and 4 norm tensors per block, ln_f's 2";
}

// Tensors starting before `begin` (a frozen prefix) are neither decayed nor moved.
TEST(AdamW, UpdateLeavesTheFrozenPrefixAlone) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.lr = 0.5f, oc.weight_decay = 0.4f, oc.grad_clip = 0;
  AdamW optim(table, oc);
  std::vector<float> params(table.total(), 1.0f), grads(table.total(), 0.25f);
  const size_t begin = table.layer_range(1).first;
  optim.update(params.data(), grads.data(), begin, oc.lr);
  for (const ParamInfo& e : table.entries())
    if (e.offset < begin) {
      ASSERT_EQ(params[e.offset], 1.0f) << e.name;
    } else {
      ASSERT_NE(params[e.offset], 1.0f) << e.name;
    }
}

// Gradients (3, 4) at two places have norm 5: clipping to 1 scales them by 1 / (5 + 1e-6).
TEST(AdamW, ClipScalesToTheGlobalNormOfTheTrainableRange) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.grad_clip = 1.0f;
  const AdamW optim(table, oc);
  const size_t begin = table.layer_range(0).first, last = table.total() - 1;
  std::vector<float> grads(table.total(), 0.0f);
  grads[0] = 100.0f;  // frozen prefix: neither counted nor scaled
  grads[begin] = 3.0f, grads[last] = -4.0f;
  EXPECT_FLOAT_EQ(optim.clip(grads.data(), begin), 5.0f);
  EXPECT_FLOAT_EQ(grads[begin], 0.6f);
  EXPECT_FLOAT_EQ(grads[last], -0.8f);
  EXPECT_EQ(grads[0], 100.0f);
  EXPECT_FLOAT_EQ(AdamW::grad_norm(grads.data(), begin, table.total()), 1.0f);

  // At or below the threshold, and with clipping off, nothing changes; the norm is still returned.
  for (float clip : {5.0f, 0.0f}) {
    oc.grad_clip = clip;
    const AdamW other(table, oc);
    std::vector<float> g(table.total(), 0.0f);
    g[begin] = 3.0f, g[last] = -4.0f;
    EXPECT_FLOAT_EQ(other.clip(g.data(), begin), 5.0f);
    EXPECT_EQ(g[begin], 3.0f) << "grad_clip " << clip;
    EXPECT_EQ(g[last], -4.0f) << "grad_clip " << clip;
  }
}

// Clipping's factor taken by the update (grad_scale) gives the parameters and moments of clip then
// update bit for bit, on the gradients as they were; Muon, which reads its matrices' gradients
// as they are, takes no factor.
TEST(AdamW, UpdateTakesClippingsFactorBitForBit) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.grad_clip = 0.5f, oc.weight_decay = 0.1f;
  AdamW clipped(table, oc), folded(table, oc);
  std::vector<float> grads(table.total()), params(table.total());
  for (size_t i = 0; i < grads.size(); ++i)
    grads[i] = std::sin(0.37f * float(i)), params[i] = std::cos(0.11f * float(i));
  std::vector<float> p1 = params, p2 = params;
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g1 = grads;
    const float norm = clipped.clip(g1.data(), 0);
    clipped.update(p1.data(), g1.data(), 0, 1e-2f);
    const float scale = folded.clip_scale(AdamW::grad_norm(grads.data(), 0, table.total()));
    EXPECT_LT(scale, 0.1f);  // clipping acts
    EXPECT_EQ(scale, oc.grad_clip / (norm + 1e-6f));
    folded.update(p2.data(), grads.data(), 0, 1e-2f, 0, {}, scale);
    EXPECT_EQ(p2, p1) << "step " << step;
  }
  EXPECT_TRUE(std::equal(clipped.m(), clipped.m() + table.total(), folded.m()));
  EXPECT_TRUE(std::equal(clipped.v(), clipped.v() + table.total(), folded.v()));
  EXPECT_EQ(folded.clip_scale(0.25f), 1.0f);
  oc.muon.enabled = true;
  AdamW muon(table, oc);
  EXPECT_FALSE(muon.folds_clip_scale());
  EXPECT_NE(frugal::testing::error_of([&] { muon.update(p2.data(), grads.data(), 0, 1e-2f, 0, {}, 0.5f); }).find("Muon"),
            std::string::npos);
}

// lr 1, min_lr 0.1, 10 warm-up steps, 110 steps: (step + 1) / 10 during warm-up, then
// 0.1 + 0.9 · (1 + cos(π · (step − 10) / 100)) / 2, then min_lr.
TEST(LrSchedule, LinearWarmupThenCosineToMinLr) {
  AdamWConfig c;
  c.lr = 1.0f, c.min_lr = 0.1f, c.warmup_steps = 10;
  EXPECT_FLOAT_EQ(lr_at(c, 0, 110), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(c, 4, 110), 0.5f);
  EXPECT_FLOAT_EQ(lr_at(c, 9, 110), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 10, 110), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 35, 110), 0.86819805f);  // cos(π/4) = 0.70710678
  EXPECT_FLOAT_EQ(lr_at(c, 60, 110), 0.55f);        // half way: (lr + min_lr) / 2
  EXPECT_FLOAT_EQ(lr_at(c, 85, 110), 0.23180195f);  // cos(3π/4)
  EXPECT_FLOAT_EQ(lr_at(c, 109, 110), 0.10022205f);  // cos(0.99π) = −0.99950656
  EXPECT_FLOAT_EQ(lr_at(c, 110, 110), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(c, 500, 110), 0.1f);
  c.warmup_steps = 0;  // no warm-up: the cosine starts at step 0
  EXPECT_FLOAT_EQ(lr_at(c, 0, 100), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 50, 100), 0.55f);
}

// Warm-up–stable–decay: lr 1, min_lr 0.1, 10 warm-up steps, 100 steps, decay_fraction 0.2: the
// warm-up as above, lr through step 79, then the decay over steps 80..99 with progress
// (step − 80) / 20 in each shape, then min_lr.
TEST(LrSchedule, WarmupStableDecayInEachShape) {
  AdamWConfig c;
  c.lr = 1.0f, c.min_lr = 0.1f, c.warmup_steps = 10, c.schedule = ScheduleKind::Wsd, c.decay_fraction = 0.2f;
  EXPECT_FLOAT_EQ(lr_at(c, 4, 100), 0.5f);
  for (DecayShape shape : {DecayShape::Linear, DecayShape::Cosine, DecayShape::Sqrt}) {
    c.decay_shape = shape;
    EXPECT_FLOAT_EQ(lr_at(c, 10, 100), 1.0f);
    EXPECT_FLOAT_EQ(lr_at(c, 79, 100), 1.0f);
    EXPECT_FLOAT_EQ(lr_at(c, 80, 100), 1.0f);  // progress 0
    EXPECT_FLOAT_EQ(lr_at(c, 100, 100), 0.1f);
  }
  c.decay_shape = DecayShape::Linear;
  EXPECT_FLOAT_EQ(lr_at(c, 85, 100), 0.1f + 0.9f * 0.75f);
  EXPECT_FLOAT_EQ(lr_at(c, 99, 100), 0.1f + 0.9f * 0.05f);
  c.decay_shape = DecayShape::Cosine;
  EXPECT_FLOAT_EQ(lr_at(c, 90, 100), 0.55f);  // half way
  EXPECT_FLOAT_EQ(lr_at(c, 85, 100), 0.1f + 0.9f * 0.85355339f);  // (1 + cos(π/4)) / 2
  c.decay_shape = DecayShape::Sqrt;
  EXPECT_FLOAT_EQ(lr_at(c, 85, 100), 0.1f + 0.9f * 0.5f);  // 1 − √(1/4)
  // A decay longer than what follows the warm-up starts at the warm-up's end.
  c.decay_fraction = 0.95f, c.decay_shape = DecayShape::Linear;
  EXPECT_FLOAT_EQ(lr_at(c, 10, 100), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 55, 100), 0.55f);
  // decay_fraction 0: lr up to the last step, min_lr after it.
  c.decay_fraction = 0.0f;
  EXPECT_FLOAT_EQ(lr_at(c, 99, 100), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(c, 100, 100), 0.1f);
}

// optim.head_lr: the untied head's rate is head_lr · lr(s) / optim.lr (scheduled like the rest); with
// zero gradients one update leaves the decay 1 − rate · wd. A tied head cannot have its own rate.
TEST(AdamW, UntiedHeadTakesItsOwnScheduledLearningRate) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.lr = 0.5f, oc.weight_decay = 0.4f, oc.grad_clip = 0, oc.head_lr = 0.25f;
  AdamW optim(table, oc);
  std::vector<float> params(table.total(), 1.0f), grads(table.total(), 0.0f);
  const float lr = 0.4f;  // a scheduled step at 0.8 of the peak
  optim.update(params.data(), grads.data(), 0, lr);
  EXPECT_FLOAT_EQ(params[table.offset_of("lm_head.weight")], 1.0f - 0.2f * 0.4f);
  EXPECT_FLOAT_EQ(params[table.offset_of("transformer.wte.weight")], 1.0f - 0.4f * 0.4f);
  EXPECT_FLOAT_EQ(params[table.offset_of("transformer.h.0.mlp.c_fc.weight")], 1.0f - 0.4f * 0.4f);
  const std::string error = frugal::testing::error_of(
      [] { run_settings(io::Config::load(run_schema(), "", {"optim.head_lr=0.001"})); });
  EXPECT_NE(error.find("optim.head_lr = 0.001 needs an untied head"), std::string::npos) << error;
  EXPECT_EQ(run_settings(io::Config::load(run_schema(), "", {"optim.head_lr=0.001", "model.tied_head=false"}))
                .optim.head_lr, 0.001f);
}
