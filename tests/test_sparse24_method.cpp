// The sparse24 method plugin: mask validity and transposability after training, row-only masks,
// the masked decay term (after clipping, through SingleProcessStep), bit-exact resume of the mask state,
// forward and every parameter gradient through the 2:4 formats equal to a dense model with masked
// weights, FLOP accounting, the flip-rate log, dense fine-tuning, and the MVUE estimator in the
// model (only masked weight gradients change, unbiased; the estimator alone is a kernel test).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "frugal/methods/sparse24/plugin.h"
#include "frugal/model/flops.h"
#include "frugal/train/step.h"
#include "frugal/train/trainer.h"
#include "gradcheck.h"
#include "model_grad.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using frugal::sparse24::Sparse24Method;
using frugal::testing::max_error_rel_to_max;
using frugal::testing::model_gradient;
using frugal::testing::TempDir;

namespace {

std::string make_data(const TempDir& dir) { return frugal::testing::make_shakespeare_data(dir, 40000); }

io::Config config(const std::string& data, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + out, "model.n_layer=2",
                                "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                                "train.batch_size=4", "train.max_steps=8", "train.eval_interval=4",
                                "train.eval_batches=2", "train.log_interval=1", "optim.warmup_steps=2",
                                "sample.count=0", "methods.sparse24.mask_interval=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", o);
}

Sparse24Method& method_of(Trainer& t) {
  auto* m = dynamic_cast<Sparse24Method*>(t.methods().methods().at(0).get());
  EXPECT_NE(m, nullptr);
  return *m;
}

// Every row (and, when transposable, every column) of every 4x4 block keeps exactly two entries.
void expect_valid_mask(const Sparse24Method::Target& t, bool transposable) {
  for (int bo = 0; bo < t.OC / 4; ++bo)
    for (int bi = 0; bi < t.IC / 4; ++bi)
      for (int i = 0; i < 4; ++i) {
        int row = 0, col = 0;
        for (int j = 0; j < 4; ++j) {
          row += t.mask[size_t(4 * bo + i) * t.IC + 4 * bi + j];
          col += t.mask[size_t(4 * bo + j) * t.IC + 4 * bi + i];
        }
        ASSERT_EQ(row, 2) << "layer " << t.layer << " block " << bo << "," << bi << " row " << i;
        if (transposable) {
          ASSERT_EQ(col, 2) << "layer " << t.layer << " block " << bo << "," << bi << " col " << i;
        }
      }
}

std::map<int64_t, nlohmann::json> read_metrics(const std::string& run_dir) {
  std::map<int64_t, nlohmann::json> out;
  for (const nlohmann::json& j : frugal::testing::logged_records(run_dir)) out[j.at("step").get<int64_t>()] = j;
  return out;
}

// A dense model with the sparse model's parameters and its masks applied to the masked weights:
// what the 2:4 formats must compute, forward and backward (the straight-through estimator gives
// the dense master weight the gradient a dense model gets at the masked weights).
std::unique_ptr<GPT> masked_dense_twin(const GPT& sparse, const Sparse24Method& m) {
  auto dense = std::make_unique<GPT>(sparse.config());
  std::copy(sparse.params(), sparse.params() + sparse.num_floats(), dense->params());
  for (const auto& target : m.targets()) {
    float* w = dense->params() + dense->linear_weight_offset(target.layer, target.which);
    for (size_t i = 0; i < target.mask.size(); ++i)
      if (!target.mask[i]) w[i] = 0.0f;
  }
  return dense;
}

// The sparse24 method on a small freshly initialised model (biases, gated MLP), driven directly
// without a Trainer or data: Init and FitStart have run, so masks come from the initial weights
// and the formats are installed. Batches are B = 2 sequences of T = 16 tokens.
struct DirectRun {
  static constexpr int B = 2, T = 16;
  RunSettings settings;
  Session session;
  GPT& model;
  AdamW& optim;
  MethodSet methods;
  std::vector<int32_t> tokens, targets;

  explicit DirectRun(const sparse24::Sparse24Config& s24, float grad_clip = 1.0f)
      : settings(make_settings(grad_clip)),
        session({.model = settings.model, .optim = settings.optim, .batch = B, .seq_len = T}),
        model(session.model()),
        optim(session.optim()) {
    model.init_weights(3);
    std::vector<std::unique_ptr<Method>> list;
    list.push_back(std::make_unique<Sparse24Method>(s24));
    methods = MethodSet(std::move(list));
    TrainContext ctx = context();
    methods.fire(Event::Init, ctx);
    methods.fire(Event::FitStart, ctx);
    for (int i = 0; i < B * T; ++i) tokens.push_back((i * 7 + 3) % 65), targets.push_back((i * 11 + 5) % 65);
  }
  TrainContext context() {
    TrainContext ctx{session};
    ctx.max_steps = settings.train.max_steps;
    ctx.batch = B;
    ctx.seq_len = T;
    ctx.seed = settings.train.seed;
    return ctx;
  }
  Sparse24Method& method() { return dynamic_cast<Sparse24Method&>(*methods.methods().at(0)); }

  static RunSettings make_settings(float grad_clip) {
    RunSettings s;
    s.model.vocab_size = 65, s.model.block_size = T, s.model.n_layer = 2, s.model.n_head = 2;
    s.model.n_embd = 32, s.model.mlp = MlpKind::Swiglu, s.model.init_std = 0.1f;
    s.train.batch_size = B, s.train.seq_len = T, s.train.max_steps = 8;
    s.optim.grad_clip = grad_clip;
    return s;
  }
};

bool is_masked_weight(const GPT& model, const Sparse24Method& m, const ParamInfo& e) {
  for (const auto& target : m.targets())
    if (model.linear_weight_offset(target.layer, target.which) == e.offset) return true;
  return false;
}

}  // namespace

TEST(Sparse24Method, MasksAreTransposable24AfterTrainingAndFlipRateIsLogged) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"), {"methods.sparse24.dense_finetune_fraction=0"}), {.quiet = true});
  const FitResult r = t.fit();
  for (float l : r.losses) EXPECT_TRUE(std::isfinite(l));
  const Sparse24Method& m = method_of(t);
  ASSERT_EQ(m.targets().size(), 4u) << "fc and fc_proj of 2 blocks";
  for (const auto& target : m.targets()) {
    expect_valid_mask(target, true);
    EXPECT_STREQ(t.model().linear_format(target.layer, target.which).name(), "sparse24");
  }
  EXPECT_TRUE(m.sparse_active());
  EXPECT_EQ(m.mask_updates(), 3) << "after steps 2, 4 and 6 (none after the last step)";
  const auto metrics = read_metrics(dir.file("run"));
  for (int64_t step = 1; step <= 8; ++step) {
    const bool update = step == 2 || step == 4 || step == 6;
    ASSERT_EQ(metrics.at(step).contains("flip_rate"), update) << step;
    if (update) {
      const double rate = metrics.at(step).at("flip_rate");
      EXPECT_GE(rate, 0.0);
      EXPECT_LE(rate, 1.0);
    }
  }
  EXPECT_GT(metrics.at(2).at("flip_rate").get<double>(), 0.0) << "lr 6e-4 over 2 steps moves some masks";
}

TEST(Sparse24Method, RowOnlyMasksAre24PerRowAndTrain) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"),
                   {"methods.sparse24.transposable=false", "methods.sparse24.dense_finetune_fraction=0",
                    "train.max_steps=4"}),
            {.quiet = true});
  for (float l : t.fit().losses) EXPECT_TRUE(std::isfinite(l));
  const Sparse24Method& m = method_of(t);
  size_t non_transposable_blocks = 0;
  for (const auto& target : m.targets()) {
    expect_valid_mask(target, false);
    for (int bo = 0; bo < target.OC / 4; ++bo)
      for (int bi = 0; bi < target.IC / 4; ++bi) {
        bool bad = false;
        for (int c = 0; c < 4; ++c) {
          int col = 0;
          for (int r = 0; r < 4; ++r) col += target.mask[size_t(4 * bo + r) * target.IC + 4 * bi + c];
          bad |= col != 2;
        }
        non_transposable_blocks += bad;
      }
  }
  EXPECT_GT(non_transposable_blocks, 0u) << "row-only masks should not all be transposable";
}

// Through SingleProcessStep, the way training runs it: after the step the gradient buffer holds the
// clipped gradient plus λ·(1 − m)⊙W (W before the update) on the masked weights, and just the
// clipped gradient elsewhere. With a clip far below the gradient norm, decay added before clipping
// would come out scaled down with everything else.
TEST(Sparse24Method, MaskedDecayAddsLambdaTimesPrunedWeightsToClippedGradients) {
  const float lambda = 0.25f;
  DirectRun run({.decay = lambda}, 1e-3f);
  GPT& model = run.model;
  std::vector<float> expect = model_gradient(model, run.tokens, run.targets);
  const size_t begin = model.trainable_begin();
  const float norm = run.optim.clip(expect.data(), begin);
  ASSERT_GT(norm, 10 * run.settings.optim.grad_clip) << "clipping must scale the gradient down";
  const std::vector<float> weights(model.params(), model.params() + model.num_floats());
  std::vector<bool> is_target(model.num_floats(), false);
  for (const auto& target : run.method().targets()) {
    const size_t o = model.linear_weight_offset(target.layer, target.which);
    for (size_t i = 0; i < target.mask.size(); ++i) {
      is_target[o + i] = true;
      if (!target.mask[i]) expect[o + i] += lambda * weights[o + i];
    }
  }

  run.session.set_lr_schedule([](int64_t) { return 1e-3f; });
  SingleProcessStep runner(run.session, run.methods, run.settings);
  const StepResult r = runner.run(0, [&](int32_t* inputs, int32_t* targets, int64_t* ids) {
    std::copy(run.tokens.begin(), run.tokens.end(), inputs);
    std::copy(run.targets.begin(), run.targets.end(), targets);
    ids[0] = 0, ids[1] = 1;
  }, nullptr);
  EXPECT_EQ(r.grad_norm, norm) << "the reported norm is the one before clipping";
  size_t others = 0;
  for (size_t i = 0; i < model.num_floats(); ++i) {
    ASSERT_NEAR(model.grads()[i], expect[i], 1e-6f * std::fabs(expect[i]) + 1e-12f) << i;
    others += !is_target[i];
  }
  EXPECT_GT(others, 0u) << "attention, embeddings and norms get no masked decay";
}

// Every parameter gradient through the 2:4 formats equals the dense model's at the masked weights,
// for transposable (2:4 input-gradient kernel) and row-only masks (dense GEMM on a masked copy).
// The gated MLP makes c_gate's input gradient accumulate onto c_fc's; linear biases included.
TEST(Sparse24Method, GradientsEqualDenseModelWithMaskedWeights) {
  for (bool transposable : {true, false}) {
    DirectRun run({.transposable = transposable});
    ASSERT_EQ(run.method().targets().size(), 6u) << "fc, c_gate and fc_proj of 2 blocks";
    auto dense = masked_dense_twin(run.model, run.method());
    dense->plan(DirectRun::B, DirectRun::T);
    const std::vector<float> gs = model_gradient(run.model, run.tokens, run.targets);
    const std::vector<float> gd = model_gradient(*dense, run.tokens, run.targets);
    for (const ParamInfo& e : run.model.table().entries())
      EXPECT_LT(max_error_rel_to_max(gs.data() + e.offset, gd.data() + e.offset, e.numel), 1e-5)
          << e.name << (transposable ? " (transposable)" : " (row-only)");
  }
}

// With MVUE only the weight gradients of the masked linears are estimated: every other gradient,
// their biases' included, equals the dense model's at the masked weights; the estimated ones
// differ from it in each draw but their mean over many draws converges to it (unbiased).
TEST(Sparse24Method, MvueChangesOnlyMaskedWeightGradientsAndIsUnbiasedThere) {
  DirectRun run({.mvue = true});
  auto dense = masked_dense_twin(run.model, run.method());
  dense->plan(DirectRun::B, DirectRun::T);
  const std::vector<float> gd = model_gradient(*dense, run.tokens, run.targets);
  const int draws = 200;
  std::vector<float> first;
  std::vector<double> mean(gd.size(), 0.0);
  for (int d = 0; d < draws; ++d) {  // each backward draws new random numbers (the call counter)
    const std::vector<float> g = model_gradient(run.model, run.tokens, run.targets);
    if (d == 0) first = g;
    for (size_t i = 0; i < g.size(); ++i) mean[i] += g[i] / double(draws);
  }
  for (const ParamInfo& e : run.model.table().entries()) {
    const double err = max_error_rel_to_max(first.data() + e.offset, gd.data() + e.offset, e.numel);
    if (!is_masked_weight(run.model, run.method(), e)) {
      EXPECT_LT(err, 1e-5) << e.name;
      continue;
    }
    auto distance = [&](auto* g) {  // ‖g − dense‖ over this tensor
      double s = 0;
      for (size_t i = 0; i < e.numel; ++i) s += std::pow(double(g[e.offset + i]) - gd[e.offset + i], 2);
      return std::sqrt(s);
    };
    const double one = distance(first.data()), averaged = distance(mean.data());
    EXPECT_GT(err, 1e-2) << e.name << ": a single MVUE draw should differ from the dense gradient";
    // Unbiased: the distance shrinks like 1/sqrt(draws) = 0.07; a biased estimator stalls.
    EXPECT_LT(averaged, 0.2 * one) << e.name;
  }
}

TEST(Sparse24Method, ForwardEqualsDenseModelWithMaskedWeightsAndFlopsHalve) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"), {"methods.sparse24.dense_finetune_fraction=0", "model.mlp=swiglu",
                                                        "train.max_steps=3"}),
            {.quiet = true});
  t.fit();
  GPT& sparse = t.model();
  const Sparse24Method& m = method_of(t);
  ASSERT_EQ(m.targets().size(), 6u) << "fc, c_gate and fc_proj of 2 blocks";
  auto dense_model = masked_dense_twin(sparse, m);
  GPT& dense = *dense_model;
  const int B = 2, T = 32, V = sparse.config().vocab_size;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7 + 3) % V;
  std::vector<float> a(size_t(B) * T * V), b(a.size());
  sparse.logits(tokens.data(), B, T, a.data());
  dense.logits(tokens.data(), B, T, b.data());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1 + std::fabs(b[i]))) << i;

  const StepFlops fs = count_step_flops(sparse, B, T), fd = count_step_flops(dense, B, T);
  const double C = sparse.config().n_embd, H = sparse.config().ffn_hidden();
  const double ffn = 2.0 * B * T * 3 * C * H;  // fc, gate, fc_proj
  EXPECT_DOUBLE_EQ(fd.executed[1].forward - fs.executed[1].forward, ffn / 2);
  EXPECT_DOUBLE_EQ(fd.executed[1].backward_input - fs.executed[1].backward_input, ffn / 2);
  EXPECT_DOUBLE_EQ(fd.executed[1].backward_weight, fs.executed[1].backward_weight);
}

TEST(Sparse24Method, ResumesBitExactlyWithMaskStateAndFinetunesDense) {
  TempDir dir;
  const std::string data = make_data(dir);
  // 8 steps: masks after steps 2 and 4; dense from step 6 on (8 - 8/4).
  const std::vector<std::string> s24 = {"methods.sparse24.dense_finetune_fraction=0.25",
                                        "methods.sparse24.decay=2e-3"};
  Trainer straight(config(data, dir.file("a"), s24), {.quiet = true});
  const FitResult all = straight.fit();
  EXPECT_FALSE(method_of(straight).sparse_active());
  for (const auto& target : method_of(straight).targets())
    EXPECT_STREQ(straight.model().linear_format(target.layer, target.which).name(), "dense");
  EXPECT_EQ(method_of(straight).mask_updates(), 2);

  auto with_ckpt = s24;
  with_ckpt.push_back("train.checkpoint_interval=3");  // step 3: between mask updates
  Trainer(config(data, dir.file("b"), with_ckpt), {.quiet = true}).fit();  // gone before the resume
  std::filesystem::remove_all(dir.file("b/checkpoints/step_00000006"));
  std::ofstream(dir.file("b/checkpoints/latest")) << "step_00000003\n";
  Trainer resumed(config(data, dir.file("b"), s24), {.resume = dir.file("b"), .quiet = true});
  const FitResult rest = resumed.fit();
  ASSERT_EQ(rest.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rest.losses[i], all.losses[3 + i]) << "step " << 3 + i;
  const auto& ta = method_of(straight).targets();
  const auto& tb = method_of(resumed).targets();
  for (size_t i = 0; i < ta.size(); ++i) EXPECT_EQ(ta[i].mask, tb[i].mask) << i;
  EXPECT_EQ(method_of(resumed).mask_updates(), 2);
  EXPECT_EQ(method_of(resumed).last_flip_rate(), method_of(straight).last_flip_rate());
  for (size_t i = 0; i < straight.model().num_floats(); ++i)
    ASSERT_EQ(straight.model().params()[i], resumed.model().params()[i]) << i;
}

TEST(Sparse24Method, MvueTrains) {
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("run"), {"methods.sparse24.mvue=true", "train.max_steps=3"}),
            {.quiet = true});
  for (float l : t.fit().losses) EXPECT_TRUE(std::isfinite(l));
}
