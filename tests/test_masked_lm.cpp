// Training, evaluating and using a masked-LM encoder (model.objective = mlm; docs/mlm.md): the
// masked-token accuracy counts the rows whose largest logit is the target; validation scores the
// same fixed masks whatever the batch size; the command line trains, evaluates, fills <mask> and
// refuses, in one line each, what an encoder cannot do; every method trains an encoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frugal/data/masking.h"
#include "frugal/data/prepare.h"
#include "frugal/model/gpt.h"
#include "frugal/train/evaluate.h"
#include "frugal/train/run_config.h"
#include "frugal/train/trainer.h"
#include "paths.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

namespace frugal {
namespace {
using testing::CliResult;
using testing::run_frugal;
using testing::TempDir;

ModelConfig encoder(int vocab) {
  ModelConfig c;
  c.objective = ObjectiveKind::Mlm;
  c.norm = NormPlacement::Post;
  c.vocab_size = vocab;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.0f;
  return c;
}

// Of the rows given a target, those whose target is the argmax of the whole logits (computed
// separately, over all B·T rows) are counted, and no other.
TEST(MaskedLm, AccuracyCountsTheRowsWhoseTargetIsTheLargestLogit) {
  const ModelConfig c = encoder(70);
  GPT model(c);
  model.init_weights(3);
  const int B = 3, T = c.block_size, V = c.vocab_size;
  std::vector<int32_t> inputs(size_t(B) * T);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<int32_t>((i * 29 + 7) % V);
  std::vector<float> logits(inputs.size() * V);
  model.logits(inputs.data(), B, T, logits.data());
  std::vector<int32_t> targets(inputs.size(), -1);
  int64_t want = 0;
  for (size_t n = 0; n < inputs.size(); ++n) {
    const float* row = logits.data() + n * V;
    const auto best = static_cast<int32_t>(std::max_element(row, row + V) - row);
    float second = -INFINITY;
    for (int v = 0; v < V; ++v)
      if (v != best) second = std::max(second, row[v]);
    // The forward computes the targeted rows' logits in a GEMM of other rows, which may round them
    // differently: a row whose two largest logits nearly tie could change its argmax there.
    const bool clear = row[best] - second > 1e-4f * std::fabs(row[best]);
    if (n % 3 == 0 && clear) targets[n] = best, ++want;         // right
    else if (n % 3 == 1 && clear) targets[n] = (best + 1) % V;  // wrong
  }
  model.forward(inputs.data(), targets.data(), 0.0f);
  EXPECT_EQ(model.correct_predictions(targets.data()), want);
  EXPECT_GT(want, 0);
}

// The validation masks are keyed by the sample id alone: batch sizes 3 and 5 score the same masked
// tokens to the same loss; about 15% of the positions are scored; the accuracy is in [0, 1].
TEST(MaskedLm, ValidationScoresTheSameFixedMasksWhateverTheBatch) {
  TempDir dir;
  const std::string data_dir = testing::make_shakespeare_data(dir, 40000);
  const auto tokenizer = data::load_prepared_tokenizer(data_dir);
  const data::MaskingSpec masking = data::encoder_masking(*tokenizer);
  EXPECT_EQ(masking.mask_id, tokenizer->vocab_size());
  GPT model(encoder(data::encoder_vocab_size(*tokenizer)));
  model.init_weights(5);
  data::BatchLoader loader(data::open_prepared_split(data_dir, "val", *tokenizer), 16, data::LoaderOrder::Sequential);
  const EvalResult three = evaluate_loss(model, loader, 3, 0, single_process(), nullptr, &masking);
  const EvalResult five = evaluate_loss(model, loader, 5, 0, single_process(), nullptr, &masking);
  EXPECT_EQ(three.tokens, five.tokens);
  EXPECT_EQ(three.correct, five.correct);
  EXPECT_NEAR(three.loss, five.loss, 1e-6 * three.loss);
  const double share = double(three.tokens) / double(three.sequences * 16);
  EXPECT_GT(share, 0.10);
  EXPECT_LT(share, 0.20);
  EXPECT_GE(three.accuracy, 0.0);
  EXPECT_LE(three.accuracy, 1.0);
  EXPECT_EQ(three.accuracy, double(three.correct) / double(three.tokens));
}

// Every method runs on an encoder (docs/mlm.md's table): the V-cycle through its small level and
// back, freezing, 2:4 and mst (dense attention) train 6 steps to finite losses with their effect
// logged, and each run differs from the plain encoder's.
TEST(MaskedLm, EveryMethodTrainsAnEncoder) {
  TempDir dir;
  const std::string data = testing::make_shakespeare_data(dir, 40000);
  const auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + dir.file(name), "model.objective=mlm",
                                  "model.norm=post", "model.n_layer=4", "model.n_head=4", "model.n_embd=32",
                                  "model.block_size=32", "train.batch_size=4", "train.max_steps=6",
                                  "train.eval_interval=3", "train.eval_batches=2", "train.log_interval=1",
                                  "sample.count=0", "model.dropout=0"};
    o.insert(o.end(), extra.begin(), extra.end());
    Trainer t(io::Config::load(run_schema(), "", o), {.quiet = true});
    return t.fit().losses;
  };
  const std::vector<float> plain = run("plain", {});
  const std::map<std::string, std::vector<std::string>> methods = {
      {"multilevel", {"methods.multilevel.shares=0.34,0.33,0.33"}},
      {"freeze", {"methods.freeze.alpha=0.5", "methods.freeze.interval=2"}},
      {"sparse24", {"methods.sparse24.mask_interval=2", "methods.sparse24.dense_finetune_fraction=0"}},
      {"mst", {"methods.mst.attention=dense", "methods.mst.update_interval=2", "methods.mst.sparsity_initial=0.5"}}};
  for (const auto& [name, settings] : methods) {
    const std::vector<float> losses = run(name, settings);
    ASSERT_EQ(losses.size(), 6u) << name;
    for (float l : losses) EXPECT_TRUE(std::isfinite(l)) << name;
    EXPECT_NE(losses, plain) << name;
  }
}

TEST(MaskedLmCli, TrainsEvaluatesFillsMasksAndRefusesWhatItCannotDo) {
  TempDir dir;
  const std::string data = testing::make_shakespeare_data(dir, 60000), run = dir.file("run");
  const std::string config = "train " + std::string(test_paths::source_dir()) + "/configs/shakespeare-char.toml --set data.dir=" +
                             data + " --set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2 "
                             "--set model.block_size=32 --set train.seq_len=32 --set train.batch_size=4 "
                             "--set train.eval_batches=2 --set train.eval_interval=3 --set train.log_interval=3 "
                             "--set model.objective=mlm --set model.norm=post --set train.out_dir=" + run;
  const CliResult train = run_frugal(config + " --set train.max_steps=6 --set 'sample.prompt=the <mask>ing'");
  ASSERT_EQ(train.rc, 0) << train.output;
  EXPECT_NE(train.output.find(" acc "), std::string::npos) << train.output;
  EXPECT_NE(train.output.find("<mask> 1:"), std::string::npos) << train.output;
  int evaluated = 0;
  for (const nlohmann::json& j : frugal::testing::logged_records(run)) {
    if (!j.contains("val_loss")) continue;
    ++evaluated;
    EXPECT_GE(j.at("val_accuracy").get<double>(), 0.0);
    EXPECT_LE(j.at("val_accuracy").get<double>(), 1.0);
  }
  EXPECT_EQ(evaluated, 2);

  const CliResult eval = run_frugal("eval " + run + " --json --max-batches 4", "2>/dev/null");
  ASSERT_EQ(eval.rc, 0) << eval.output;
  const nlohmann::json e = nlohmann::json::parse(eval.output);
  EXPECT_EQ(e.at("objective"), "mlm");
  EXPECT_GE(e.at("accuracy").get<double>(), 0.0);
  EXPECT_LT(e.at("tokens").get<int64_t>(), e.at("sequences").get<int64_t>() * 32 / 4);  // the masked only

  const CliResult fill = run_frugal("fill-mask " + run + " --text 'First <mask>itizen' --top 3", "2>/dev/null");
  ASSERT_EQ(fill.rc, 0) << fill.output;
  EXPECT_NE(fill.output.find("<mask> 1:"), std::string::npos) << fill.output;
  EXPECT_NE(fill.output.find("filled: First "), std::string::npos) << fill.output;
  EXPECT_NE(fill.output.find("itizen"), std::string::npos) << fill.output;

  for (const auto& [command, refusal] :
       {std::pair{"fill-mask " + run + " --text 'nothing to fill'", "has no <mask> to fill"},
        std::pair{"sample " + run, "this model is an encoder"},
        std::pair{config + " --overwrite --set methods.mst.sparsity_final=0.5", "is a causal sparse pattern"},
        std::pair{config + " --overwrite --set methods.freeze.autocache=on", "cannot cache an encoder's"},
        std::pair{config + " --overwrite --set model.vocab_size=40", "the encoder's vocabulary"}}) {
    const CliResult r = run_frugal(command);
    EXPECT_EQ(r.rc, 1) << command;
    EXPECT_NE(r.output.find(refusal), std::string::npos) << command << "\n" << r.output;
  }

  const std::string causal = dir.file("causal");
  const CliResult decoder = run_frugal("train " + std::string(test_paths::source_dir()) + "/configs/shakespeare-char.toml "
                                       "--set data.dir=" + data + " --set model.n_layer=1 --set model.n_embd=32 "
                                       "--set model.n_head=2 --set train.max_steps=1 --set sample.count=0 "
                                       "--set train.eval_batches=1 --set train.out_dir=" + causal);
  ASSERT_EQ(decoder.rc, 0) << decoder.output;
  const CliResult refused = run_frugal("fill-mask " + causal + " --text 'a <mask>'");
  EXPECT_EQ(refused.rc, 1);
  EXPECT_NE(refused.output.find("causal decoder"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace frugal
