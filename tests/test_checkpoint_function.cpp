// Every command that loads a checkpoint computes the function its run was training (issue 25):
// short runs of sparse24 (sparse phase), mst (the hold's sparse attention) and multilevel (a
// coalesced level of the V-cycle) write checkpoints; `frugal eval` of each must give the
// validation loss the run logged at that step on the same batches, `frugal sample` must run the
// same model, `frugal export` must write the weights it computes with (or refuse what the format
// cannot express), --init-from must start from those weights, and a lost methods.safetensors must
// be named as such.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "error_of.h"
#include "frugal/io/safetensors.h"
#include "frugal/model/decoder.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/run_config.h"
#include "frugal/train/trainer.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::error_of;
using frugal::testing::run_frugal;
using frugal::testing::TempDir;

namespace {

constexpr int kBatch = 4, kEvalBatches = 2, kSeqLen = 32;

// A 2-layer model on the start of Tiny Shakespeare, evaluated and checkpointed every 4 steps.
io::Config config(const std::string& data, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + out, "model.n_layer=2",
                                "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                                fmt::format("train.seq_len={}", kSeqLen),
                                fmt::format("train.batch_size={}", kBatch), "train.max_steps=12",
                                "train.eval_interval=4", "train.checkpoint_interval=4",
                                "train.keep_checkpoints=10",
                                fmt::format("train.eval_batches={}", kEvalBatches),
                                "train.log_interval=1", "optim.warmup_steps=2", "sample.count=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", o);
}

std::string checkpoint(const std::string& run_dir, int step) {
  return run_dir + "/checkpoints/" + fmt::format("step_{:08}", step);
}

// The val_loss the run logged after `step` steps.
double logged_val_loss(const std::string& run_dir, int step) {
  for (const nlohmann::json& j : frugal::testing::logged_records(run_dir))
    if (j.value("step", -1) == step && j.contains("val_loss")) return j.at("val_loss").get<double>();
  ADD_FAILURE() << "no val_loss logged at step " << step;
  return 0;
}

// `frugal eval --json` of a checkpoint on the batches training evaluated.
nlohmann::json cli_eval(const std::string& checkpoint_dir, const std::string& extra = "") {
  const CliResult r = run_frugal(fmt::format("eval {} --batch-size {} --max-batches {} --json {}",
                                             checkpoint_dir, kBatch, kEvalBatches, extra), "2>&1");
  EXPECT_EQ(r.rc, 0) << r.output;
  return r.rc == 0 ? nlohmann::json::parse(r.output) : nlohmann::json{{"loss", -1.0}, {"methods", {}}};
}

// eval of the checkpoint of `step` equals the val loss logged then (to float rounding: the log
// holds a float, eval prints a double of the same sum); returns eval's method notes, joined.
std::string expect_eval_matches_log(const std::string& run_dir, int step) {
  const nlohmann::json j = cli_eval(checkpoint(run_dir, step));
  EXPECT_NEAR(j.at("loss").get<double>(), logged_val_loss(run_dir, step), 2e-6) << "step " << step;
  std::string notes;
  for (const auto& n : j.at("methods")) notes += n.get<std::string>() + "\n";
  return notes;
}

// Greedy samples (no near-tie between logits is likely to flip a token) of a checkpoint; stdout.
std::string greedy_sample(const std::string& checkpoint_dir, const std::string& redirect = "2>/dev/null") {
  const CliResult r = run_frugal("sample " + checkpoint_dir + " --prompt 'ROMEO:' --max-tokens 40 --top-k 1",
                                 redirect);
  EXPECT_EQ(r.rc, 0) << r.output;
  return r.output;
}

// Fraction of exact zeros in tensor `name` of a safetensors file.
double zero_fraction(const std::string& file, const std::string& name) {
  const std::vector<float> w = io::read_safetensors(file).at(name).to_f32(name);
  return static_cast<double>(std::count(w.begin(), w.end(), 0.0f)) / static_cast<double>(w.size());
}

}  // namespace

// Sparse phase until step 9 of 12 (dense_finetune_fraction 0.25): the checkpoints of steps 4 and 8
// compute with their 2:4 masks, the one of step 12 is dense.
TEST(CheckpointFunction, Sparse24CheckpointsAreEvaluatedSampledAndExportedWithTheirMasks) {
  TempDir dir;
  const std::string data = frugal::testing::make_shakespeare_data(dir, 40000);
  const std::string run = dir.file("run");
  Trainer(config(data, run, {"methods.sparse24.mask_interval=2", "methods.sparse24.dense_finetune_fraction=0.25"}),
          {.quiet = true}).fit();
  for (int step : {4, 8}) {
    const std::string notes = expect_eval_matches_log(run, step);
    EXPECT_TRUE(contains(notes, "methods.sparse24: 2:4 sparse weights of the sparse phase")) << notes;
  }
  EXPECT_EQ(expect_eval_matches_log(run, 12), "") << "dense fine-tuning: a dense model";

  // The export holds the masks' zeros: half of every masked weight (fc, fc_proj of each block).
  const std::string sparse = checkpoint(run, 8);
  CliResult r = run_frugal("export --format hf " + sparse + " " + dir.file("hf"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "methods.sparse24: 2:4 sparse weights")) << r.output;
  for (const char* name : {"transformer.h.0.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight"})
    EXPECT_EQ(zero_fraction(dir.file("hf/model.safetensors"), name), 0.5) << name;
  EXPECT_LT(zero_fraction(dir.file("hf/model.safetensors"), "transformer.h.0.attn.c_attn.weight"), 0.01);

  // The export, imported back, is a dense model of the same function: eval and greedy samples agree
  // with the checkpoint's (which would run its dense master weights without the masks).
  r = run_frugal("import " + dir.file("hf") + " " + dir.file("imported"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const nlohmann::json imported = cli_eval(dir.file("imported"), fmt::format("--data {} --seq-len {}", data, kSeqLen));
  EXPECT_NEAR(imported.at("loss").get<double>(), logged_val_loss(run, 8), 1e-4);
  EXPECT_EQ(greedy_sample(sparse), greedy_sample(dir.file("imported")));
  EXPECT_TRUE(contains(greedy_sample(sparse, "2>&1 >/dev/null"), "methods.sparse24: 2:4 sparse weights"));

  // --init-from starts from the weights the masks keep.
  Trainer dense(config(data, dir.file("dense"), {}), {.init_from = sparse, .quiet = true});
  const GPT& model = dense.model();
  const float* fc = model.params() + model.linear_weight_offset(0, GPT::Linear::Fc);
  const auto [oc, ic] = model.linear_shape(GPT::Linear::Fc);
  EXPECT_EQ(std::count(fc, fc + size_t(oc) * ic, 0.0f), int64_t(oc) * ic / 2);
}

// The hold runs from step 3 to the end (restore_fraction 1) with strided attention of window and
// stride 4 over sequences of 32: every checkpoint, the final one included, attends sparsely.
TEST(CheckpointFunction, MstHoldCheckpointsAttendAsTrained) {
  TempDir dir;
  const std::string data = frugal::testing::make_shakespeare_data(dir, 40000);
  const std::string run = dir.file("run");
  Trainer(config(data, run, {"methods.mst.update_interval=3", "methods.mst.warmup_fraction=0.25",
                             "methods.mst.restore_fraction=1", "methods.mst.attention_window=4",
                             "methods.mst.attention_stride=4"}),
          {.quiet = true}).fit();
  for (int step : {4, 8, 12}) {
    const std::string notes = expect_eval_matches_log(run, step);
    EXPECT_TRUE(contains(notes, "strided(w=4,s=4) attention in every block")) << notes;
  }

  // The decoder that sample runs (a prefill, then cached steps) attends as the full forward does:
  // the restored pattern.
  const CheckpointModel loaded = load_checkpoint_model(checkpoint(run, 8));
  for (int l = 0; l < 2; ++l) EXPECT_EQ(loaded->attention_pattern(l), kernels::AttentionPattern::strided(4, 4));
  std::vector<int32_t> tokens(24);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((7 * i + 3) % 40);
  const int V = loaded->config().vocab_size;
  std::vector<float> full(tokens.size() * V);
  loaded->logits(tokens.data(), 1, static_cast<int>(tokens.size()), full.data());
  Decoder decoder(*loaded);
  const float* last = decoder.prefill(std::span<const int32_t>(tokens).first(10));
  for (size_t i = 10; i < tokens.size(); ++i) last = decoder.step(tokens[i]);
  for (int v = 0; v < V; ++v) EXPECT_NEAR(last[v], full[(tokens.size() - 1) * V + v], 1e-4) << v;
  const CliResult sample = run_frugal("sample " + checkpoint(run, 8) + " --max-tokens 5", "2>&1 >/dev/null");
  EXPECT_TRUE(contains(sample.output, "strided(w=4,s=4) attention")) << sample.output;

  // GPT-2's format cannot express the pattern: refused, or exported with it named as dropped.
  CliResult r = run_frugal("export --format hf " + checkpoint(run, 8) + " " + dir.file("hf"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.output, "error: blocks 0, 1 attend with strided(w=4,s=4), which the Hugging Face GPT-2 "
                      "format cannot express (GPT2LMHeadModel attends to every earlier position), so "
                      "the export would compute another function; pass --allow-lossy to export it "
                      "anyway with dense causal attention\n");
  r = run_frugal("export --format hf --allow-lossy " + checkpoint(run, 8) + " " + dir.file("hf"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "dropped (--allow-lossy): blocks 0, 1 attend with strided(w=4,s=4); "
                                 "the exported model attends to every earlier position")) << r.output;
}

// A two-level V-cycle of 10 steps: level 2 (2 layers, 2 heads of 8) for steps 3-7; the checkpoint
// of step 5 holds the coalesced model.
TEST(CheckpointFunction, CoalescedVCycleLevelIsNamedAndEvaluatedAsTrained) {
  TempDir dir;
  const std::string data = frugal::testing::make_shakespeare_data(dir, 40000);
  const std::string run = dir.file("run");
  Trainer(config(data, run, {"model.n_layer=4", "model.n_head=4", "train.max_steps=10",
                             "train.eval_interval=5", "train.checkpoint_interval=5",
                             "methods.multilevel.shares=0.2,0.5,0.3"}),
          {.quiet = true}).fit();
  const std::string level2 =
      "methods.multilevel: level 2 of the 2-level V-cycle: the coalesced model (2 layers, 2 heads, "
      "n_embd 16) that the run was training at this step, not the configured model (4 layers, 4 "
      "heads, n_embd 32)";
  EXPECT_EQ(expect_eval_matches_log(run, 5), level2 + "\n");
  EXPECT_EQ(expect_eval_matches_log(run, 10), "") << "back at level 1";
  const CliResult sample = run_frugal("sample " + checkpoint(run, 5) + " --max-tokens 5", "2>&1 >/dev/null");
  EXPECT_TRUE(contains(sample.output, level2)) << sample.output;
  const CliResult r = run_frugal("export --format hf " + checkpoint(run, 5) + " " + dir.file("hf"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, level2)) << r.output;

  // Without its methods.safetensors (the kept level-1 weights), the checkpoint says so.
  const std::string lost = checkpoint(run, 5) + "/methods.safetensors";
  std::filesystem::remove(lost);
  const CliResult eval = run_frugal("eval " + checkpoint(run, 5));
  EXPECT_EQ(eval.rc, 1);
  EXPECT_TRUE(contains(eval.output, lost + " is missing: the checkpoint keeps methods' state in it "
                                    "(multilevel/kept.0); copy the file back")) << eval.output;
  const auto resume = [&] {
    Trainer(config(data, dir.file("resumed"), {"model.n_layer=4", "model.n_head=4", "train.max_steps=10",
                                               "train.eval_interval=5", "train.checkpoint_interval=5",
                                               "methods.multilevel.shares=0.2,0.5,0.3"}),
            {.resume = checkpoint(run, 5), .quiet = true}).fit();
  };
  EXPECT_TRUE(contains(error_of(resume), lost + " is missing")) << error_of(resume);
  // A checkpoint written before its state listed the file: the V-cycle names the file too.
  const std::string state_file = checkpoint(run, 5) + "/train_state.safetensors";
  io::SafeTensors st = io::read_safetensors(state_file);
  nlohmann::json state = nlohmann::json::parse(st.metadata.at("state"));
  state.erase("method_tensors");
  st.metadata["state"] = state.dump();
  io::write_safetensors(state_file, st);
  const std::string unlisted = "methods.multilevel: the checkpoint is at level 2 of its V-cycle but "
                               "holds the kept weights of 0 of the 1 levels above it: its "
                               "methods.safetensors is missing or incomplete; copy that file back";
  EXPECT_TRUE(contains(error_of(resume), unlisted)) << error_of(resume);
  EXPECT_TRUE(contains(run_frugal("eval " + checkpoint(run, 5)).output, unlisted));
}
