// Mixed Sparsity Training (methods/mst): the pure pieces (schedule, drop fraction, Erdős–Rényi
// densities, prune/grow counts against METHODS.md's formula, random masks, drop-and-grow choices),
// one topology update on a session (dropped weights and the moments of dropped and grown entries
// zeroed, gradients masked), and the plugin in runs: mask invariants (W, m, v zero outside the
// masks), the sparsity schedule and hybrid attention phases, counts in the metrics, the static
// control, bit-exact resume mid-phase, and configuration errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "error_of.h"
#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/methods/mst/plugin.h"
#include "frugal/methods/mst/sparsity.h"
#include "frugal/model/formats/sparse.h"
#include "frugal/model/formats/sparse24.h"
#include "frugal/train/trainer.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using namespace frugal::mst;
using frugal::testing::TempDir;

namespace {

std::string make_data(const TempDir& dir) { return frugal::testing::make_shakespeare_data(dir, 40000); }

io::Config config(const std::string& data, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + out, "model.n_layer=2",
                                "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                                "train.batch_size=4", "train.max_steps=20", "train.eval_interval=10",
                                "train.eval_batches=2", "train.log_interval=1", "optim.warmup_steps=2",
                                "sample.count=0", "methods.mst.update_interval=3",
                                "methods.mst.attention_window=4", "methods.mst.attention_stride=4"};
  o.insert(o.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", o);
}

MstMethod& method_of(Trainer& t) {
  MstMethod* m = nullptr;
  for (const auto& x : t.methods().methods())
    if (auto* p = dynamic_cast<MstMethod*>(x.get())) m = p;
  EXPECT_NE(m, nullptr);
  return *m;
}

// The metrics records by 0-based step (a record's "step" counts the steps done).
std::map<int64_t, nlohmann::json> read_metrics(const std::string& run_dir) {
  std::map<int64_t, nlohmann::json> out;
  for (const nlohmann::json& j : frugal::testing::logged_records(run_dir))
    if (j.contains("step") && j.contains("sparsity")) out[j.at("step").get<int64_t>() - 1] = j;
  return out;
}

// W, and AdamW's m and v where the optimizer holds them, are exactly zero outside every mask.
void expect_zero_outside_masks(Trainer& t) {
  GPT& model = t.model();
  AdamW& optim = t.session().optim();
  for (const auto& target : method_of(t).targets()) {
    const size_t off = model.linear_weight_offset(target.layer, target.which);
    ASSERT_EQ(target.active, std::count(target.mask.begin(), target.mask.end(), uint8_t{1}));
    for (int64_t i = 0; i < target.size(); ++i) {
      if (target.mask[i]) continue;
      ASSERT_EQ(model.params()[off + i], 0.0f) << target.layer << "/" << int(target.which) << " entry " << i;
      ASSERT_EQ(optim.m()[off + i - optim.shard_begin()], 0.0f) << i;
      ASSERT_EQ(optim.v()[off + i - optim.shard_begin()], 0.0f) << i;
    }
  }
}

}  // namespace

TEST(MstSparsity, ScheduleHasThreePhases) {
  SparsitySchedule s{.initial = 0.2, .peak = 0.9, .final = 0.5, .warmup_fraction = 0.1, .restore_fraction = 0.8};
  EXPECT_EQ(s.warmup_end(100), 10);
  EXPECT_EQ(s.restore_start(100), 80);
  EXPECT_DOUBLE_EQ(s.at(0, 100), 0.2);
  EXPECT_DOUBLE_EQ(s.at(5, 100), 0.2 + 0.7 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(10, 100), 0.9);
  EXPECT_DOUBLE_EQ(s.at(79, 100), 0.9);
  EXPECT_DOUBLE_EQ(s.at(90, 100), 0.9 - 0.4 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(100, 100), 0.5);
  EXPECT_FALSE(s.in_hold(9, 100));
  EXPECT_TRUE(s.in_hold(10, 100));
  EXPECT_TRUE(s.in_hold(79, 100));
  EXPECT_FALSE(s.in_hold(80, 100));
  SparsitySchedule flat{.initial = 0.8, .peak = 0.8, .final = 0.8, .warmup_fraction = 0, .restore_fraction = 1};
  for (int64_t t : {0, 1, 50, 99, 100}) EXPECT_DOUBLE_EQ(flat.at(t, 100), 0.8) << t;
}

TEST(MstSparsity, DropFractionDecaysByCosine) {
  EXPECT_DOUBLE_EQ(drop_fraction(0.3, 0, 1000), 0.3);
  EXPECT_NEAR(drop_fraction(0.3, 500, 1000), 0.15, 1e-15);
  EXPECT_NEAR(drop_fraction(0.3, 250, 1000), 0.15 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_EQ(drop_fraction(0.3, 1000, 1000), 0.0);
}

TEST(MstSparsity, ErdosRenyiDensitiesMeetTheTargetAndClampDenseLayers) {
  // A GPT block at C = 64: qkv (192,64), proj (64,64), fc (256,64), fc_proj (64,256), and a tiny
  // layer whose ER density would exceed 1.
  const std::vector<std::pair<int, int>> shapes = {{192, 64}, {64, 64}, {256, 64}, {64, 256}, {4, 4}};
  for (double density : {0.05, 0.1, 0.3, 0.6}) {
    const std::vector<double> d = layer_densities(shapes, density);
    double kept = 0, total = 0;
    for (size_t l = 0; l < shapes.size(); ++l) {
      const double n = double(shapes[l].first) * shapes[l].second;
      kept += d[l] * n, total += n;
      EXPECT_LE(d[l], 1.0);
    }
    EXPECT_NEAR(kept / total, density, 1e-12) << density;
    EXPECT_EQ(d[4], 1.0) << "the 4x4 layer's ER density exceeds 1 at " << density;
    // Among sparse layers, density / ((OC + IC) / (OC·IC)) is one constant ε.
    const auto eps = [&](size_t l) { return d[l] * shapes[l].first * shapes[l].second / (shapes[l].first + shapes[l].second); };
    for (size_t l = 1; l < 4; ++l)
      if (d[l] < 1) {
        EXPECT_NEAR(eps(l), eps(0), 1e-9 * eps(0)) << density << " layer " << l;
      }
  }
  const std::vector<double> u = layer_densities(shapes, 0.25, /*uniform=*/true);
  for (double d : u) EXPECT_EQ(d, 0.25);
  for (double d : layer_densities(shapes, 1.0)) EXPECT_EQ(d, 1.0);
}

TEST(MstSparsity, UpdateCountsFollowTheFormula) {
  // Rising sparsity: n_prune = max(⌊a·ζ⌋, a − a'), n_grow = n_prune − (a − a').
  UpdateCounts c = update_counts(1000, 500, 300, 0.3);
  EXPECT_EQ(c.prune, 200);
  EXPECT_EQ(c.grow, 0);
  c = update_counts(1000, 500, 450, 0.3);
  EXPECT_EQ(c.prune, 150);
  EXPECT_EQ(c.grow, 100);
  // Constant sparsity: the cosine fraction only.
  c = update_counts(1000, 101, 101, 0.3);
  EXPECT_EQ(c.prune, 30);
  EXPECT_EQ(c.grow, 30);
  // Falling sparsity (restoration): more grown than pruned.
  c = update_counts(1000, 100, 400, 0.1);
  EXPECT_EQ(c.prune, 10);
  EXPECT_EQ(c.grow, 310);
  // Restoring to full: nothing can be pruned and regrown (candidates are the inactive ones).
  c = update_counts(1000, 900, 1000, 0.3);
  EXPECT_EQ(c.prune, 0);
  EXPECT_EQ(c.grow, 100);
  c = update_counts(1000, 900, 980, 0.3);
  EXPECT_EQ(c.prune, 20);
  EXPECT_EQ(c.grow, 100);
  EXPECT_THROW(update_counts(10, 11, 5, 0.1), frugal::Error);
}

TEST(MstSparsity, RandomMaskHasTheExactCountAndIsReproducible) {
  for (int64_t active : {0, 1, 37, 999, 1000}) {
    const auto m = random_mask(1000, active, 7, 3);
    EXPECT_EQ(std::count(m.begin(), m.end(), uint8_t{1}), active);
    EXPECT_EQ(m, random_mask(1000, active, 7, 3));
  }
  EXPECT_NE(random_mask(1000, 100, 7, 3), random_mask(1000, 100, 7, 4));
}

TEST(MstSparsity, DropAndGrowPicksBySizeAndGradient) {
  const int64_t n = 400;
  Rng rng(1, 2);
  std::vector<float> w(n), g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(rng.normal());
  std::vector<uint8_t> mask = random_mask(n, 100, 5, 0);
  for (int64_t i = 0; i < n; ++i) w[i] = mask[i] ? static_cast<float>(rng.normal()) : 0.0f;
  const std::vector<uint8_t> before = mask;
  const UpdateCounts counts{.prune = 30, .grow = 40};
  const UpdateResult r = drop_and_grow(mask, w, g, counts, 0.25, 9, 1);
  ASSERT_EQ(r.dropped.size(), 30u);
  ASSERT_EQ(r.grown.size(), 40u);
  EXPECT_EQ(std::count(mask.begin(), mask.end(), uint8_t{1}), 110);
  // Dropped: active before, and no kept weight is smaller in magnitude than a dropped one.
  float max_dropped = 0, min_kept = INFINITY;
  std::vector<bool> dropped(n, false), grown(n, false);
  for (int64_t i : r.dropped) {
    ASSERT_TRUE(before[i]) << i;
    dropped[i] = true;
    max_dropped = std::max(max_dropped, std::fabs(w[i]));
  }
  for (int64_t i = 0; i < n; ++i)
    if (before[i] && !dropped[i]) min_kept = std::min(min_kept, std::fabs(w[i]));
  EXPECT_LE(max_dropped, min_kept);
  // Grown: inactive before; the first 30 (3 of 4) have the largest |g| among the candidates.
  for (int64_t i : r.grown) {
    ASSERT_FALSE(before[i]) << i;
    grown[i] = true;
  }
  float min_by_grad = INFINITY;
  for (size_t k = 0; k < 30; ++k) min_by_grad = std::min(min_by_grad, std::fabs(g[r.grown[k]]));
  int larger_left = 0;
  for (int64_t i = 0; i < n; ++i) larger_left += !before[i] && !grown[i] && std::fabs(g[i]) > min_by_grad;
  EXPECT_EQ(larger_left, 0);
  // Reproducible, and the random 10 depend on the stream.
  std::vector<uint8_t> again = before, other = before;
  EXPECT_EQ(drop_and_grow(again, w, g, counts, 0.25, 9, 1).grown, r.grown);
  EXPECT_NE(drop_and_grow(other, w, g, counts, 0.25, 9, 2).grown, r.grown);
}

TEST(MstMethod, TopologyUpdateZeroesDroppedWeightsAndMomentsAndMasksGradients) {
  ModelConfig c;
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  Session session({.model = c, .batch = 2, .seq_len = 16});
  GPT& model = session.model();
  model.init_weights(3);
  MstConfig mc;
  mc.schedule = {.initial = 0.5, .peak = 0.5, .final = 0.5, .warmup_fraction = 0, .restore_fraction = 1};
  mc.update_interval = 2;
  MstMethod method(mc);
  TrainContext ctx{.session = session, .step = 0, .max_steps = 10, .seed = 11};
  method.apply(Event::Init, ctx);
  method.apply(Event::FitStart, ctx);
  EXPECT_NEAR(method.sparsity(), 0.5, 1e-3);
  // Moments and gradients as after some steps: non-zero inside the masks, gradients everywhere.
  AdamW& optim = session.optim();
  optim.set_steps_taken(4);
  Rng rng(4, 4);
  for (size_t i = 0; i < model.num_floats(); ++i) model.grads()[i] = static_cast<float>(rng.normal());
  for (const auto& t : method.targets()) {
    const size_t off = model.linear_weight_offset(t.layer, t.which);
    for (int64_t i = 0; i < t.size(); ++i) {
      optim.m()[off + i] = t.mask[i] ? 0.5f : 0.0f;
      optim.v()[off + i] = t.mask[i] ? 0.25f : 0.0f;
    }
  }
  const auto before = method.targets();
  const std::vector<float> grads(model.grads(), model.grads() + model.num_floats());
  const std::vector<float> weights(model.params(), model.params() + model.num_floats());
  ctx.step = 4;
  ASSERT_TRUE(method.is_update_step(4, 10));
  method.apply(Event::AfterGradReduce, ctx);
  EXPECT_EQ(method.topology_updates(), 1);
  EXPECT_NEAR(method.sparsity(), 0.5, 1e-3);
  const double zeta = drop_fraction(0.3, 4, 10);
  int64_t changed_total = 0;
  for (size_t k = 0; k < before.size(); ++k) {
    const auto& a = before[k];
    const auto& b = method.targets()[k];
    const size_t off = model.linear_weight_offset(a.layer, a.which);
    int64_t dropped = 0, grown = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
      const size_t p = off + i;
      if (a.mask[i] && !b.mask[i]) {
        ++dropped;
        EXPECT_EQ(model.params()[p], 0.0f);
        EXPECT_EQ(optim.m()[p], 0.0f);
        EXPECT_EQ(optim.v()[p], 0.0f);
      } else if (!a.mask[i] && b.mask[i]) {
        ++grown;
        EXPECT_EQ(model.params()[p], 0.0f);
        EXPECT_EQ(optim.m()[p], 0.0f);
        EXPECT_EQ(optim.v()[p], 0.0f);
        EXPECT_EQ(model.grads()[p], grads[p]) << "a grown weight keeps its gradient";
      } else if (a.mask[i]) {
        EXPECT_EQ(model.params()[p], weights[p]);
        EXPECT_EQ(optim.m()[p], 0.5f);
        EXPECT_EQ(model.grads()[p], grads[p]);
      }
      if (!b.mask[i]) {
        EXPECT_EQ(model.grads()[p], 0.0f) << "gradient outside the new mask";
      }
    }
    const int64_t expect = static_cast<int64_t>(std::floor(a.active * zeta));
    EXPECT_EQ(dropped, expect) << k;
    EXPECT_EQ(grown, expect) << k;
    changed_total += dropped;
  }
  EXPECT_GT(changed_total, 0);
  // The new masks reach the formats at the Reconfigure after the step.
  ctx.request_reconfigure = false;
  method.apply(Event::AfterOptimStep, ctx);
  EXPECT_TRUE(ctx.request_reconfigure);
  method.apply(Event::Reconfigure, ctx);
  for (const auto& t : method.targets()) {
    auto* f = dynamic_cast<MaskedFormat*>(&model.linear_format(t.layer, t.which));
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(std::equal(t.mask.begin(), t.mask.end(), f->mask().begin()));
  }
}

TEST(MstMethod, RunKeepsMasksFollowsTheScheduleAndSwitchesAttention) {
  TempDir dir;
  // 20 steps: warm-up 0 → 0.8 over steps [0, 6), hold [6, 14), restoration to 0.4; updates at
  // 3, 6, 9, 12, 15, 18.
  Trainer t(config(make_data(dir), dir.file("run"),
                   {"methods.mst.sparsity_peak=0.8", "methods.mst.sparsity_final=0.4",
                    "methods.mst.warmup_fraction=0.3", "methods.mst.restore_fraction=0.7"}),
            {.quiet = true});
  const FitResult r = t.fit();
  for (float l : r.losses) EXPECT_TRUE(std::isfinite(l));
  expect_zero_outside_masks(t);
  MstMethod& m = method_of(t);
  EXPECT_EQ(m.topology_updates(), 6);
  const auto metrics = read_metrics(dir.file("run"));
  ASSERT_EQ(metrics.size(), 20u);
  const SparsitySchedule s{.initial = 0, .peak = 0.8, .final = 0.4, .warmup_fraction = 0.3, .restore_fraction = 0.7};
  EXPECT_EQ(metrics.at(0).at("sparsity").get<double>(), 0.0);
  for (int64_t step : {3, 6, 9, 12, 15, 18}) {
    // After the update at `step`, the sparsity is the schedule's at the end of the new masks' run:
    // one past their last step, the next update's (ER rounding aside); the last masks run to the end.
    const int64_t end = step == 18 ? 20 : step + 4;
    EXPECT_EQ(m.target_step(step, 20), end) << step;
    EXPECT_NEAR(metrics.at(step).at("sparsity").get<double>(), s.at(end, 20), 2e-3) << step;
    EXPECT_TRUE(metrics.at(step).contains("mst_pruned")) << step;
  }
  // Each phase ends at its configured sparsity: the peak at the warm-up's last step (5), and
  // sparsity_final at the run's last step (it used to end at the schedule's value at step 19).
  EXPECT_NEAR(metrics.at(5).at("sparsity").get<double>(), 0.8, 2e-3);
  EXPECT_NEAR(metrics.at(19).at("sparsity").get<double>(), 0.4, 2e-3);
  EXPECT_NEAR(m.sparsity(), 0.4, 2e-3);
  EXPECT_FALSE(metrics.at(4).contains("mst_pruned"));
  // Restoration: attention back to causal.
  for (int l = 0; l < 2; ++l) EXPECT_EQ(t.model().attention_pattern(l), kernels::AttentionPattern::causal());
  // Linear formats: sparse where the mask is not full.
  for (const auto& target : m.targets())
    EXPECT_STREQ(t.model().linear_format(target.layer, target.which).name(), target.active < target.size() ? "sparse" : "dense");
}

TEST(MstMethod, HoldUsesTheSparseAttentionPattern) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"),
                   {"train.max_steps=8", "methods.mst.warmup_fraction=0.25", "methods.mst.restore_fraction=1",
                    "methods.mst.attention=fixed", "methods.mst.attention_block=8"}),
            {.quiet = true});
  t.fit();
  for (int l = 0; l < 2; ++l) EXPECT_EQ(t.model().attention_pattern(l), kernels::AttentionPattern::fixed(8, 1));
  // attention = dense keeps causal attention through the hold, and trains differently.
  Trainer dense(config(make_data(dir), dir.file("dense"),
                       {"train.max_steps=8", "methods.mst.warmup_fraction=0.25", "methods.mst.restore_fraction=1",
                        "methods.mst.attention=dense"}),
                {.quiet = true});
  const FitResult d = dense.fit();
  for (int l = 0; l < 2; ++l) EXPECT_EQ(dense.model().attention_pattern(l), kernels::AttentionPattern::causal());
  Trainer strided(config(make_data(dir), dir.file("strided"),
                         {"train.max_steps=8", "methods.mst.warmup_fraction=0.25", "methods.mst.restore_fraction=1"}),
                  {.quiet = true});
  const FitResult s = strided.fit();
  EXPECT_EQ(d.losses[1], s.losses[1]) << "the same before the hold";
  EXPECT_NE(d.losses[7], s.losses[7]) << "the pattern changes the function in the hold";
}

TEST(MstMethod, StaticMaskNeverChanges) {
  TempDir dir;
  const std::vector<std::string> s = {"methods.mst.dynamic=false", "methods.mst.sparsity_initial=0.7",
                                      "methods.mst.sparsity_peak=0.7", "methods.mst.sparsity_final=0.7",
                                      "methods.mst.attention=dense", "train.max_steps=6"};
  Trainer a(config(make_data(dir), dir.file("a"), s), {.quiet = true});
  a.fit();
  // The mask of step 0 is the one a fresh method draws from the same seed.
  Trainer b(config(make_data(dir), dir.file("b"), [&] { auto x = s; x.push_back("train.max_steps=1"); return x; }()), {.quiet = true});
  b.fit();
  EXPECT_EQ(method_of(a).topology_updates(), 0);
  for (size_t k = 0; k < method_of(a).targets().size(); ++k)
    EXPECT_EQ(method_of(a).targets()[k].mask, method_of(b).targets()[k].mask) << k;
  EXPECT_NEAR(method_of(a).sparsity(), 0.7, 1e-3);
  expect_zero_outside_masks(a);
}

namespace {

// The 20-step run of `mst` against itself resumed from a checkpoint in every phase: the same
// losses, masks, topology updates and weights, bit for bit.
void expect_resume_mid_phase_bit_exact(const std::vector<std::string>& settings) {
  TempDir dir;
  const std::string data = make_data(dir);
  auto mst = settings;
  mst.insert(mst.end(), {"methods.mst.warmup_fraction=0.3", "methods.mst.restore_fraction=0.7"});
  Trainer straight(config(data, dir.file("a"), mst), {.quiet = true});
  const FitResult all = straight.fit();
  // Checkpoints in every phase: 4 (warm-up, between updates), 7 (hold, just after the update at
  // 6), 13 (the last hold step before restoration) and 16 (restoration, after the update at 15).
  for (int64_t at : {4, 7, 13, 16}) {
    const std::string run = dir.file("b" + std::to_string(at));
    auto with_ckpt = mst;
    with_ckpt.push_back("train.checkpoint_interval=" + std::to_string(at));
    with_ckpt.push_back("train.keep_checkpoints=10");
    Trainer(config(data, run, with_ckpt), {.quiet = true}).fit();
    for (const auto& e : std::filesystem::directory_iterator(run + "/checkpoints"))
      if (e.is_directory() && e.path().filename() != fmt::format("step_{:08d}", at)) std::filesystem::remove_all(e.path());
    std::ofstream(run + "/checkpoints/latest") << fmt::format("step_{:08d}\n", at);
    Trainer resumed(config(data, run, mst), {.resume = run, .quiet = true});
    const FitResult rest = resumed.fit();
    ASSERT_EQ(rest.losses.size(), size_t(20 - at)) << at;
    for (size_t i = 0; i < rest.losses.size(); ++i) EXPECT_EQ(rest.losses[i], all.losses[at + i]) << "step " << at + i;
    for (size_t k = 0; k < method_of(straight).targets().size(); ++k)
      EXPECT_EQ(method_of(straight).targets()[k].mask, method_of(resumed).targets()[k].mask) << k;
    EXPECT_EQ(method_of(resumed).topology_updates(), method_of(straight).topology_updates());
    for (size_t i = 0; i < straight.model().num_floats(); ++i)
      ASSERT_EQ(straight.model().params()[i], resumed.model().params()[i]) << at << ": " << i;
  }
}

}  // namespace

TEST(MstMethod, ResumeMidPhaseIsBitExact) { expect_resume_mid_phase_bit_exact({}); }

// Muon's orthogonalised update is dense, so the method zeroes the weights outside the masks after
// every step: the invariant holds at the end of a run through every phase (its momentum, kept in
// m, is zero there as AdamW's moments are), the run resumes bit-exactly, and it is Muon's run.
TEST(MstMethod, UnderMuonTheWeightsOutsideTheMasksStayZeroAndResumeIsBitExact) {
  TempDir dir;
  const std::vector<std::string> s = {"optim.name=muon", "methods.mst.sparsity_peak=0.8",
                                      "methods.mst.warmup_fraction=0.3", "methods.mst.restore_fraction=0.9"};
  Trainer muon(config(make_data(dir), dir.file("muon"), s), {.quiet = true});
  const FitResult m = muon.fit();
  EXPECT_GT(method_of(muon).sparsity(), 0.4);  // still sparse at the end: the check below has entries to check
  expect_zero_outside_masks(muon);
  Trainer adamw(config(make_data(dir), dir.file("adamw"), {s.begin() + 1, s.end()}), {.quiet = true});
  const FitResult a = adamw.fit();
  EXPECT_EQ(m.losses[0], a.losses[0]);
  EXPECT_NE(m.losses[5], a.losses[5]);
  expect_resume_mid_phase_bit_exact({"optim.name=muon"});
}

// Beside 2:4 every block linear has one owner: 2:4 masks the FFN linears, mst the attention
// projections only (its densities over those); the pair trains in its hold and resumes
// bit-exactly; 2:4 on the attention too leaves mst nothing and is refused in one line.
TEST(MstMethod, BesideSparse24ItMasksTheAttentionProjectionsOnly) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::vector<std::string> pair = {"methods.mst.warmup_fraction=0.3", "methods.mst.restore_fraction=0.7",
                                         "methods.sparse24.mask_interval=4", "methods.sparse24.dense_finetune_fraction=0"};
  Trainer straight(config(data, dir.file("a"), pair), {.quiet = true});
  const FitResult all = straight.fit();
  for (const auto& target : method_of(straight).targets())
    EXPECT_TRUE(target.which == GPT::Linear::Qkv || target.which == GPT::Linear::Proj) << int(target.which);
  EXPECT_EQ(method_of(straight).targets().size(), 4u);  // 2 layers × qkv, proj
  const GPT& model = straight.model();
  for (int l = 0; l < 2; ++l) {
    EXPECT_NE(dynamic_cast<const Sparse24Format*>(&model.linear_format(l, GPT::Linear::Fc)), nullptr) << l;
    EXPECT_NE(dynamic_cast<const Sparse24Format*>(&model.linear_format(l, GPT::Linear::FcProj)), nullptr) << l;
    EXPECT_NE(dynamic_cast<const SparseFormat*>(&model.linear_format(l, GPT::Linear::Qkv)), nullptr) << l;
  }
  expect_zero_outside_masks(straight);

  auto with_ckpt = pair;
  with_ckpt.insert(with_ckpt.end(), {"train.checkpoint_interval=10", "train.keep_checkpoints=10"});
  Trainer(config(data, dir.file("b"), with_ckpt), {.quiet = true}).fit();
  const FitResult rest = Trainer(config(data, dir.file("c"), pair),
                                 {.resume = dir.file("b") + "/checkpoints/step_00000010", .quiet = true}).fit();
  ASSERT_EQ(rest.losses.size(), 10u);
  for (size_t i = 0; i < rest.losses.size(); ++i) EXPECT_EQ(rest.losses[i], all.losses[10 + i]) << "step " << 10 + i;

  const std::string refused = frugal::testing::error_of([&] {
    Trainer t(config(data, dir.file("d"), {"methods.sparse24.include_attention=true"}), {.quiet = true});
  });
  EXPECT_NE(refused.find("leaving methods.mst none to mask"), std::string::npos) << refused;
}

TEST(MstMethod, BadSettingsGetOneLineErrors) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"methods.mst.warmup_fraction=0.9", "methods.mst.restore_fraction=0.5"}, "warmup_fraction <= restore_fraction"},
      {{"methods.mst.dynamic=false"}, "cannot vary"},
      {{"methods.mst.distribution=er"}, "erdos_renyi or uniform"},
      {{"methods.mst.attention=sparse"}, "strided, fixed or dense"},
      {{"methods.mst.sparsity_peak=1"}, "sparsity_peak"},
      // Pattern lengths must be below model.block_size (32 here), the key named.
      {{"methods.mst.attention_window=32"}, "methods.mst.attention_window = 32 is not below model.block_size = 32"},
      {{"methods.mst.attention_stride=64"}, "methods.mst.attention_stride = 64 is not below model.block_size = 32"},
      {{"methods.mst.attention=fixed", "methods.mst.attention_block=40"},
       "methods.mst.attention_block = 40 is not below model.block_size = 32"}};
  for (const auto& [extra, expect] : cases) {
    try {
      Trainer t(config(data, dir.file("x"), extra), {.quiet = true});
      t.fit();
      ADD_FAILURE() << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
  // Only the configured pattern's lengths are checked: dense attention ignores the window.
  EXPECT_NO_THROW(run_settings(config(data, dir.file("x"), {"methods.mst.attention=dense", "methods.mst.attention_window=64"})));
}

TEST(MstSparsity, MagnitudeMaskKeepsTheLargest) {
  const std::vector<float> w = {0.5f, -2.0f, 0.1f, 2.0f, -0.3f, 0.0f};
  EXPECT_EQ(magnitude_mask(w, 3), (std::vector<uint8_t>{1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(magnitude_mask(w, 1), (std::vector<uint8_t>{0, 1, 0, 0, 0, 0}));  // tie: lower index
  EXPECT_EQ(magnitude_mask(w, 0), (std::vector<uint8_t>(6, 0)));
  EXPECT_EQ(magnitude_mask(w, 6), (std::vector<uint8_t>(6, 1)));
}

TEST(MstMethod, FrozenLayersKeepTheirMasks) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::vector<std::string> s = {"methods.mst.sparsity_initial=0.6", "methods.mst.sparsity_peak=0.6",
                                      "methods.mst.sparsity_final=0.6", "methods.mst.update_interval=2",
                                      "methods.mst.attention=dense", "train.max_steps=8"};
  Trainer first(config(data, dir.file("a"), [&] { auto x = s; x.push_back("train.max_steps=1"); return x; }()), {.quiet = true});
  first.fit();
  auto frozen = s;
  frozen.push_back("methods.freeze.frozen_layers=1");
  Trainer t(config(data, dir.file("b"), frozen), {.quiet = true});
  t.fit();
  ASSERT_EQ(t.model().frozen_prefix(), 1);
  const MstMethod& m = method_of(t);
  EXPECT_EQ(m.topology_updates(), 3);
  for (size_t k = 0; k < m.targets().size(); ++k) {
    const bool same = m.targets()[k].mask == method_of(first).targets()[k].mask;
    EXPECT_EQ(same, m.targets()[k].layer == 0) << "linear " << k << " of layer " << m.targets()[k].layer;
  }
}

// With the V-cycle (methods.multilevel): the masks follow each level change (new shapes, the
// current sparsity, W, m, v zero outside), and a resume inside the small level is bit-exact.
TEST(MstMethod, FollowsMultilevelReshapesAndResumes) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::vector<std::string> s = {"methods.mst.sparsity_initial=0.5", "methods.mst.sparsity_peak=0.5",
                                      "methods.mst.sparsity_final=0.5", "methods.mst.update_interval=2",
                                      "methods.mst.attention=dense", "train.max_steps=12",
                                      "methods.multilevel.shares=0.25,0.5,0.25"};
  Trainer straight(config(data, dir.file("a"), s), {.quiet = true});
  const FitResult all = straight.fit();
  MstMethod& m = method_of(straight);
  EXPECT_EQ(straight.session().reshapes(), 2);
  EXPECT_EQ(m.targets().size(), 8u);  // back at level 1: 2 layers × qkv, proj, fc, fc_proj
  EXPECT_EQ(m.targets()[0].OC, 96);
  EXPECT_NEAR(m.sparsity(), 0.5, 2e-3);
  expect_zero_outside_masks(straight);
  for (const auto& t : m.targets())
    EXPECT_STREQ(straight.model().linear_format(t.layer, t.which).name(), "sparse");

  auto with_ckpt = s;
  with_ckpt.push_back("train.checkpoint_interval=5");  // step 5: inside level 2
  Trainer(config(data, dir.file("b"), with_ckpt), {.quiet = true}).fit();
  std::filesystem::remove_all(dir.file("b/checkpoints/step_00000010"));
  std::ofstream(dir.file("b/checkpoints/latest")) << "step_00000005\n";
  Trainer resumed(config(data, dir.file("b"), s), {.resume = dir.file("b"), .quiet = true});
  const FitResult rest = resumed.fit();
  ASSERT_EQ(rest.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(rest.losses[i], all.losses[5 + i]) << "step " << 5 + i;
  for (size_t k = 0; k < m.targets().size(); ++k) EXPECT_EQ(m.targets()[k].mask, method_of(resumed).targets()[k].mask) << k;
}

// FLOP accounting follows the sparse formats: below the break-even density the products count
// the mask's density, and an update step counts its dense weight gradient.
TEST(MstMethod, FlopsCountSparseProductsAndTheUpdatesDenseWeightGradient) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"),
                   {"methods.mst.sparsity_initial=0.7", "methods.mst.sparsity_peak=0.7",
                    "methods.mst.sparsity_final=0.7", "methods.mst.attention=dense", "train.max_steps=6"}),
            {.quiet = true});
  t.fit();
  for (const auto& target : method_of(t).targets())
    EXPECT_STREQ(t.model().linear_format(target.layer, target.which).name(), "sparse");
  const auto metrics = read_metrics(dir.file("run"));
  const auto weight_grad = [&](int64_t step) { return metrics.at(step).at("step_flops").at("backward_weight").get<double>(); };
  const auto forward = [&](int64_t step) { return metrics.at(step).at("step_flops").at("forward").get<double>(); };
  // Steps 2 and 4 run the same sparsity; step 3 is an update step (update_interval 3).
  EXPECT_NEAR(weight_grad(4), weight_grad(2), 1e-6 * weight_grad(2));
  EXPECT_GT(weight_grad(3), 1.5 * weight_grad(2));
  EXPECT_NEAR(forward(3), forward(2), 1e-6 * forward(2));
  const double dense = metrics.at(2).at("dense_flops").get<double>() - metrics.at(1).at("dense_flops").get<double>();
  const double executed = metrics.at(2).at("flops").get<double>() - metrics.at(1).at("flops").get<double>();
  EXPECT_LT(executed, 0.6 * dense);
}
