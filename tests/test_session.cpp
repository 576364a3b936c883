// The session seam: a method defined here (not in the library), "widen", doubles the model's width
// mid-run with a function-preserving map of the weights and AdamW moments and halves the learning
// rate, using only the session API. Training goes on, checkpoints store the new shape, and resuming
// before or after the change is bit-exact. Also: capabilities are enforced, and a session of a
// block range or with a non-dense format refuses to reshape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "frugal/core/error.h"
#include "frugal/methods/method_set.h"
#include "frugal/model/formats/masked.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/trainer.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
namespace fs = std::filesystem;
using frugal::testing::error_of;
using frugal::testing::logged_records;
using frugal::testing::TempDir;

namespace {

// The model of twice the width: n_embd and n_head doubled (the head size stays), so every block
// keeps its heads and gains a copy of each.
ModelConfig widened(const ModelConfig& c) {
  ModelConfig w = c;
  w.n_embd *= 2;
  w.n_head *= 2;
  return w;
}

// Net2Net-style widening of an untied GPT: the residual stream x becomes [x, x] and every layer
// computes its old output twice. A doubled dimension lists its old entries twice, part by part
// (the qkv output has the parts q, k, v, each of n_embd, so q becomes [q, q] and the new heads
// are copies of the old ones); a linear weight whose input doubled is halved, so that it sums the
// two copies of its input back to the old value. LayerNorm sees the same mean and variance over
// [x, x] as over x. AdamW's moments follow their weights (m scaled like the weight, v squared).
void widen_tensors(const NamedTensors& from, const NamedTensors& to) {
  for (const ParamInfo& e : to.table().entries()) {
    const ParamInfo& old = from.table().at(e.name);
    const bool qkv = e.name.find("c_attn") != std::string::npos;
    // new index along dim d -> old index
    auto source = [&](size_t d, int64_t n) {
      const int64_t old_size = old.shape[d];
      if (e.shape[d] == old_size) return n;
      const int64_t parts = qkv && d == 0 ? 3 : 1, part = old_size / parts;
      return n / (2 * part) * part + n % (2 * part) % part;
    };
    const bool halve = e.role == ParamRole::Weight && e.shape.size() == 2 && e.shape[1] != old.shape[1];
    const float scale = halve ? 0.5f : 1.0f;
    const int64_t cols = e.shape.size() == 2 ? e.shape[1] : 1, old_cols = old.shape.size() == 2 ? old.shape[1] : 1;
    const auto w = from.param(e.name), m = from.m(e.name), v = from.v(e.name);
    const auto w2 = to.param(e.name), m2 = to.m(e.name), v2 = to.v(e.name);
    for (int64_t r = 0; r < e.shape[0]; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        const size_t o = size_t(source(0, r) * old_cols + (e.shape.size() == 2 ? source(1, c) : 0));
        w2[i] = w[o] * scale;
        m2[i] = m[o] * scale;
        v2[i] = v[o] * scale * scale;
      }
  }
}

class Widen final : public Method {
 public:
  explicit Widen(int64_t at) : at_(at) {}
  std::string name() const override { return "widen"; }
  Capabilities capabilities() const override { return {.changes_shapes = true}; }
  bool match(Event event, const TrainContext& ctx) const override {
    return !done_ && ((event == Event::AfterOptimStep && ctx.step + 1 == at_) || event == Event::Reconfigure);
  }
  void apply(Event event, TrainContext& ctx) override {
    if (event == Event::AfterOptimStep) {
      ctx.request_reconfigure = true;
      return;
    }
    ctx.session.reshape(widened(ctx.model().config()), widen_tensors);
    ctx.session.scale_lr(0.5);
    done_ = true;
  }
  nlohmann::json save_state() const override { return {{"done", done_}}; }
  void load_state(const nlohmann::json& state) override { done_ = state.at("done"); }

 private:
  int64_t at_;
  bool done_ = false;
};

// "methods.widen.at": the step after which the model widens.
const bool kWidenRegistered = [] {
  register_method({"widen", "test method: doubles the width after step `at` and halves the LR",
                   [](io::ConfigSchema& s, const std::string& p) {
                     s.add_int(p + ".at", 4, "step after which to widen", io::Range::at_least(1));
                   },
                   [](const io::Config& c, const std::string& p) -> std::unique_ptr<Method> {
                     return std::make_unique<Widen>(c.get_int(p + ".at"));
                   },
                   {}});
  return true;
}();

io::Config widen_config(const std::string& data_dir, const std::string& out_dir,
                        std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "data.dir=" + data_dir, "train.out_dir=" + out_dir, "model.n_layer=2", "model.n_head=2",
      "model.n_embd=32", "model.block_size=32", "model.tied_head=false", "model.dropout=0.1",
      "train.batch_size=4", "train.max_steps=10", "train.eval_interval=5", "train.eval_batches=2",
      "train.log_interval=1", "optim.warmup_steps=2", "sample.count=0", "methods.widen.at=4"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", overrides);
}

}  // namespace

TEST(Session, WideningMapPreservesTheModelsFunction) {
  ModelConfig c;
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.tied_head = false;
  for (MlpKind mlp : {MlpKind::Gelu, MlpKind::Swiglu}) {
    c.mlp = mlp;
    Session session({.model = c, .batch = 2, .seq_len = 16});
    session.model().init_weights(5);
    std::vector<int32_t> tokens(32), targets(32);
    for (int i = 0; i < 32; ++i) tokens[i] = (i * 7) % 40, targets[i] = (i * 11 + 3) % 40;
    const float before = session.model().forward(tokens.data(), targets.data(), 0.0f);
    session.reshape(widened(c), widen_tensors);
    EXPECT_EQ(session.model().config().n_embd, 64);
    EXPECT_EQ(session.reshapes(), 1);
    const float after = session.model().forward(tokens.data(), targets.data(), 0.0f);
    EXPECT_NEAR(after, before, 1e-5f * before) << mlp_kind_name(mlp);
  }
}

TEST(Session, AMethodWidensTheModelMidRunAndResumeIsBitExact) {
  ASSERT_TRUE(kWidenRegistered);
  TempDir dir;
  const std::string data = frugal::testing::make_shakespeare_data(dir, 60000);
  const TrainerOptions quiet{.quiet = true};
  FitResult all;
  {
    Trainer straight(widen_config(data, dir.file("a")), quiet);
    EXPECT_EQ(straight.model().config().n_embd, 32);
    all = straight.fit();
    EXPECT_EQ(straight.model().config().n_embd, 64);
    EXPECT_EQ(straight.session().lr_scale(), 0.5);
  }
  ASSERT_EQ(all.losses.size(), 10u);
  for (float loss : all.losses) ASSERT_TRUE(std::isfinite(loss));
  // The widened run trains on with half the schedule's learning rate.
  const auto lines = logged_records(dir.file("a"));
  ASSERT_EQ(lines.size(), 10u);
  AdamWConfig schedule = run_settings(widen_config(data, dir.file("a"))).optim;
  for (int step = 0; step < 10; ++step)
    EXPECT_FLOAT_EQ(lines[step]["lr"].get<float>(), lr_at(schedule, step, 10) * (step >= 4 ? 0.5f : 1.0f))
        << "step " << step;
  EXPECT_GT(lines[9]["flops"].get<double>() - lines[8]["flops"].get<double>(),
            3 * (lines[1]["flops"].get<double>() - lines[0]["flops"].get<double>()))
      << "a step of the widened model counts about 4x the FLOPs of a linear-dominated narrow step";
  // The checkpoint holds the new shape; inference loads it from there.
  const std::string final_checkpoint = resolve_checkpoint(dir.file("a"));
  EXPECT_EQ(checkpoint_model_config(final_checkpoint).n_embd, 64);
  EXPECT_EQ(load_checkpoint_model(final_checkpoint)->config().n_head, 4);

  const std::vector<std::string> checkpointing = {"train.checkpoint_interval=3", "train.keep_checkpoints=5"};
  FitResult checkpointed = Trainer(widen_config(data, dir.file("b"), checkpointing), quiet).fit();
  EXPECT_EQ(checkpointed.losses, all.losses);
  for (int from : {6, 3}) {  // after the widening, and before it (it widens during the resumed run)
    std::ofstream(dir.file("b/checkpoints/latest")) << fmt::format("step_{:08}\n", from);
    Trainer resumed(widen_config(data, dir.file("b"), checkpointing), {.resume = dir.file("b"), .quiet = true});
    EXPECT_EQ(resumed.model().config().n_embd, from > 4 ? 64 : 32);
    const FitResult rest = resumed.fit();
    ASSERT_EQ(rest.losses.size(), size_t(10 - from));
    for (int i = 0; i < 10 - from; ++i) EXPECT_EQ(rest.losses[i], all.losses[from + i]) << "resumed at " << from << ", step " << from + i;
    EXPECT_EQ(resumed.session().lr_scale(), 0.5);
  }
}

TEST(Session, CapabilitiesAreEnforced) {
  // A method that reshapes without declaring it stops the run.
  struct Undeclared final : Method {
    std::string name() const override { return "undeclared"; }
    bool match(Event e, const TrainContext&) const override { return e == Event::Reconfigure; }
    void apply(Event, TrainContext& ctx) override { ctx.session.reshape(widened(ctx.model().config()), nullptr); }
  };
  ModelConfig c;
  c.tied_head = false;
  Session session({.model = c, .batch = 1, .seq_len = 8});
  std::vector<std::unique_ptr<Method>> list;
  list.push_back(std::make_unique<Undeclared>());
  MethodSet methods(std::move(list));
  TrainContext ctx{session};
  EXPECT_NE(error_of([&] { methods.fire(Event::Reconfigure, ctx); }).find("declare Capabilities::changes_shapes"),
            std::string::npos);
  // A shape-changing method next to one that keeps masks is refused at start-up.
  struct Masks final : Method {
    explicit Masks(bool follows) : follows(follows) {}
    std::string name() const override { return "masks"; }
    Capabilities capabilities() const override { return {.owns_masks = true, .follows_reshape = follows}; }
    bool match(Event, const TrainContext&) const override { return false; }
    void apply(Event, TrainContext&) override {}
    bool follows;
  };
  std::vector<std::unique_ptr<Method>> both;
  both.push_back(std::make_unique<Widen>(1));
  both.push_back(std::make_unique<Masks>(false));
  EXPECT_NE(error_of([&] { MethodSet set(std::move(both)); }).find("methods.widen changes the model's shapes"),
            std::string::npos);
  // One that follows reshapes is accepted when it fires after the reshaping method.
  std::vector<std::unique_ptr<Method>> following;
  following.push_back(std::make_unique<Widen>(1));
  following.push_back(std::make_unique<Masks>(true));
  EXPECT_NO_THROW(MethodSet set(std::move(following)));
  std::vector<std::unique_ptr<Method>> before;
  before.push_back(std::make_unique<Masks>(true));
  before.push_back(std::make_unique<Widen>(1));
  EXPECT_NE(error_of([&] { MethodSet set(std::move(before)); }).find("methods.masks follows the reshapes of methods.widen but fires before it"),
            std::string::npos);
}

TEST(Session, ReshapeRefusesRangesAndStartsTheNewModelDenseAndCausal) {
  ModelConfig c;
  c.tied_head = false;
  Session stage({.model = c, .batch = 1, .seq_len = 8}, BlockRange{0, 2, true, false});
  EXPECT_NE(error_of([&] { stage.reshape(widened(c), nullptr); }).find("only a session of the whole model"),
            std::string::npos);
  Session whole({.model = c, .batch = 1, .seq_len = 8});
  const auto [oc, ic] = whole.model().linear_shape(GPT::Linear::Fc);
  whole.model().set_linear_format(1, GPT::Linear::Fc,
                                  std::make_shared<MaskedFormat>(oc, ic, std::vector<uint8_t>(size_t(oc) * ic, 1)));
  whole.model().set_attention_pattern(0, kernels::AttentionPattern::local(4));
  whole.reshape(widened(c), nullptr);
  EXPECT_STREQ(whole.model().linear_format(1, GPT::Linear::Fc).name(), "dense");
  EXPECT_EQ(whole.model().attention_pattern(0), kernels::AttentionPattern::causal());
}
