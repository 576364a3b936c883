// The inference commands of the `frugal` binary (sample, eval), run as a user would against a
// checkpoint of a small random model: outputs equal what the library computes, options take
// effect, and out-of-range arguments give a one-line error and a non-zero exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "frugal/core/rng.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "frugal/model/gpt.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/run_config.h"
#include "frugal/train/sampler.h"
#include "temp_dir.h"
#include "run_cli.h"

namespace fs = std::filesystem;

using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::run_frugal;

namespace {

constexpr int kSeqLen = 16;

// Writes a prepared data directory of `text` (char tokenizer, the last quarter as val.bin).
frugal::data::CharTokenizer write_char_data(const fs::path& dir, const std::string& text) {
  const auto tok = frugal::data::CharTokenizer::from_text(text);
  fs::create_directories(dir);
  const std::vector<int32_t> ids = tok.encode(text);
  const size_t split = ids.size() * 3 / 4;
  frugal::data::write_shard((dir / "train.bin").string(), {ids.data(), split}, tok.vocab_size());
  frugal::data::write_shard((dir / "val.bin").string(), {ids.data() + split, ids.size() - split},
                            tok.vocab_size());
  std::ofstream(dir / frugal::data::kTokenizerFile) << tok.to_json();
  return tok;
}

std::string pangrams() {
  std::string text;
  for (int i = 0; i < 12; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  return text;
}

// A prepared data directory (char tokenizer) and a run directory holding one checkpoint of a
// random 2-layer model whose config points data.dir at it.
class InferCli : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() / "data";
    const auto tok = write_char_data(data_, pangrams());

    frugal::io::Config config(frugal::run_schema());
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"model.vocab_size", std::to_string(tok.vocab_size())},
                               {"model.block_size", "32"}, {"model.n_layer", "2"}, {"model.n_head", "2"},
                               {"model.n_embd", "32"}, {"data.dir", data_.string()},
                               {"train.seq_len", std::to_string(kSeqLen)}})
      config.set(k, v);
    frugal::GPT model(frugal::run_settings(config).model);
    model.init_weights(3);
    frugal::Rng rng(5, 0);  // larger weights than the initialisation: peaked, varied predictions
    for (size_t i = 0; i < model.num_floats(); ++i) model.params()[i] += static_cast<float>(0.2 * rng.normal());
    run_ = tmp_.path() / "run";
    checkpoint_ = frugal::save_checkpoint(run_.string(), config, model, nullptr, {}, tok.to_json(), 1);
  }

  // A new run holding the fixture's model as checkpoint step_00000001, then with `change` made
  // to it as step_00000002; returns the run directory.
  std::string run_with_changed_checkpoint(const std::function<void(frugal::GPT&)>& change) {
    const std::string run = (tmp_.path() / "changed").string();
    const auto config = frugal::checkpoint_config(checkpoint_, frugal::run_schema());
    const std::string tokenizer = frugal::data::read_text_file(frugal::data::tokenizer_file(checkpoint_));
    const auto model = frugal::load_checkpoint_model(checkpoint_);
    frugal::save_checkpoint(run, config, *model, nullptr, {.step = 1}, tokenizer, 2);
    change(*model);
    frugal::save_checkpoint(run, config, *model, nullptr, {.step = 2}, tokenizer, 2);
    return run;
  }

  frugal::testing::TempDir tmp_;
  fs::path data_, run_;
  std::string checkpoint_;
};

TEST_F(InferCli, SampleStreamsWhatGenerateMakes) {
  const CliResult r = run_frugal("sample " + run_.string() + " --prompt 'the ' --max-tokens 40 --temperature 0.7 "
                       "--top-k 10 --top-p 0.9 --seed 4", "2>/dev/null");
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto model = frugal::load_checkpoint_model(checkpoint_);
  const auto tok = frugal::data::load_tokenizer_json(frugal::data::tokenizer_file(checkpoint_));
  const std::vector<int32_t> prompt = tok->encode("the ");
  const frugal::SampleOptions o{.max_tokens = 40, .temperature = 0.7, .top_k = 10, .top_p = 0.9, .seed = 4};
  const std::vector<int32_t> all = frugal::generate(*model, prompt, o);
  const std::string text = tok->decode(std::span<const int32_t>(all).subspan(prompt.size()));
  EXPECT_EQ(r.output, "--- sample 1 ---\nthe " + text + "\n");
}

TEST_F(InferCli, SampleCountSeedsAndStats) {
  const CliResult a = run_frugal("sample " + checkpoint_ + " --count 2 --max-tokens 30 --seed 9", "2>/dev/null");
  ASSERT_EQ(a.rc, 0) << a.output;
  const size_t second = a.output.find("--- sample 2 ---\n");
  ASSERT_NE(second, std::string::npos) << a.output;
  EXPECT_NE(a.output.substr(17, 31), a.output.substr(second + 17, 31)) << "samples 1 and 2 share a seed";
  EXPECT_EQ(run_frugal("sample " + checkpoint_ + " --count 2 --max-tokens 30 --seed 9", "2>/dev/null").output, a.output);
  EXPECT_NE(run_frugal("sample " + checkpoint_ + " --count 2 --max-tokens 30 --seed 10", "2>/dev/null").output, a.output);
  const CliResult stats = run_frugal("sample " + checkpoint_ + " --max-tokens 5 --threads 1", "2>&1 >/dev/null");
  EXPECT_TRUE(contains(stats.output, "5 tokens in")) << stats.output;
  EXPECT_TRUE(contains(stats.output, "1 threads")) << stats.output;
}

TEST_F(InferCli, SampleRejectsBadArguments) {
  const std::string ckpt = run_.string();
  const std::pair<std::string, std::string> cases[] = {
      {"--temperature 0", "temperature = 0 must be a positive number"},
      {"--temperature -1", "temperature = -1 must be a positive number"},
      {"--top-p 1.5", "top-p = 1.5 must be in (0, 1]"},
      {"--top-p 0", "top-p = 0 must be in (0, 1]"},
      {"--top-k -1", "top-k = -1 must be 0 (off) or positive"},
      {"--max-tokens 0", "max tokens = 0 must be at least 1"},
      {"--count 0", "count = 0 must be at least 1"},
      {"--prompt 'the Zebra'", "'Z' (U+005A) at byte offset 4 is not in the character vocabulary"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_frugal("sample " + ckpt + " " + args);
    EXPECT_EQ(r.rc, 1) << args << ": " << r.output;
    EXPECT_TRUE(r.output.starts_with("error: ")) << args << ": " << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
  }
  const CliResult missing = run_frugal("sample " + (tmp_.path() / "nothing").string());
  EXPECT_EQ(missing.rc, 1) << missing.output;
}

// Mean next-token loss over the val shard's sequences, from full-sequence logits in double.
double expected_val_loss(const std::string& checkpoint, const fs::path& data, int64_t* sequences) {
  const auto model = frugal::load_checkpoint_model(checkpoint);
  const auto shard = frugal::data::TokenShard::open((data / "val.bin").string());
  const int V = model->config().vocab_size;
  *sequences = (shard.size() - 1) / kSeqLen;
  std::vector<int32_t> seq(kSeqLen + 1);
  std::vector<float> logits(size_t(kSeqLen) * V);
  double sum = 0;
  for (int64_t s = 0; s < *sequences; ++s) {
    shard.read(s * kSeqLen, kSeqLen + 1, seq.data());
    model->logits(seq.data(), 1, kSeqLen, logits.data());
    for (int t = 0; t < kSeqLen; ++t) {
      const float* row = &logits[size_t(t) * V];
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(double(row[v]));
      sum += std::log(z) - row[seq[t + 1]];
    }
  }
  return sum / (*sequences * kSeqLen);
}

TEST_F(InferCli, EvalMatchesFullSequenceLoss) {
  int64_t sequences = 0;
  const double expected = expected_val_loss(checkpoint_, data_, &sequences);
  ASSERT_GT(sequences, 3);
  // Batches of 3: the last batch is short unless 3 divides the count; every token weighs the same.
  const CliResult r = run_frugal("eval " + run_.string() + " --batch-size 3 --json");
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["sequences"], sequences);
  EXPECT_EQ(j["tokens"], sequences * kSeqLen);
  EXPECT_EQ(j["split"], "val");
  EXPECT_EQ(j["seq_len"], kSeqLen);
  EXPECT_NEAR(j["loss"].get<double>(), expected, 1e-4 * expected);
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(expected), 1e-3 * std::exp(expected));
}

// A checkpoint of a train.precision = "bf16" run is evaluated with bf16 GEMMs, as it was trained:
// eval's loss is the bf16 model's full-sequence loss, measurably not the fp32 one's.
TEST_F(InferCli, EvalComputesABf16RunsFunction) {
  auto config = frugal::checkpoint_config(checkpoint_, frugal::run_schema());
  config.set("train.precision", "bf16");
  const auto model = frugal::load_checkpoint_model(checkpoint_);
  const fs::path run = tmp_.path() / "bf16";
  const std::string tokenizer = frugal::data::read_text_file(frugal::data::tokenizer_file(checkpoint_));
  const std::string checkpoint = frugal::save_checkpoint(run.string(), config, *model, nullptr, {}, tokenizer, 1);
  int64_t sequences = 0;
  const double bf16 = expected_val_loss(checkpoint, data_, &sequences);
  const double fp32 = expected_val_loss(checkpoint_, data_, &sequences);
  EXPECT_GT(std::abs(bf16 - fp32), 1e-4 * fp32) << "the bf16 checkpoint was evaluated in fp32";
  const CliResult r = run_frugal("eval " + run.string() + " --batch-size 3 --json");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NEAR(nlohmann::json::parse(r.output)["loss"].get<double>(), bf16, 1e-5 * bf16);
}

TEST_F(InferCli, EvalOptions) {
  CliResult r = run_frugal("eval " + checkpoint_ + " --batch-size 2 --max-batches 1 --json");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["sequences"], 2);

  r = run_frugal("eval " + checkpoint_ + " --split train --data " + data_.string() + " --seq-len 8");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "train.bin")) << r.output;
  EXPECT_TRUE(contains(r.output, "sequences of 8 tokens")) << r.output;
  EXPECT_TRUE(contains(r.output, "train loss ")) << r.output;
  EXPECT_TRUE(contains(r.output, "perplexity ")) << r.output;
}

TEST_F(InferCli, EvalRejectsBadArguments) {
  const std::pair<std::string, std::string> cases[] = {
      {"--data " + (tmp_.path() / "none").string(), "none/frugal_tokenizer.json not found"},
      {"--batch-size 0", "--batch-size 0 must be at least 1"},
      {"--max-batches -1", "--max-batches -1 must be 0 (all) or positive"},
      {"--seq-len 64", "--seq-len 64 exceeds the model's block_size 32"},
      // Refused before allocating, with eval's own options as the advice (not train.* keys).
      {"--batch-size 2000000000", "--batch-size 2000000000 of 16-token sequences needs"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_frugal("eval " + run_.string() + " " + args);
    EXPECT_EQ(r.rc, 1) << args << ": " << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    EXPECT_FALSE(contains(r.output, "train.")) << args << ": " << r.output;
  }
  EXPECT_NE(run_frugal("eval " + run_.string() + " --split test").rc, 0);
}

TEST_F(InferCli, EvalRefusesDataOfAnotherTokenizer) {
  std::string text = pangrams();
  std::replace(text.begin(), text.end(), 'q', 'Q');  // as many characters, one of them another
  write_char_data(tmp_.path() / "other", text);
  const CliResult r = run_frugal("eval " + run_.string() + " --data " + (tmp_.path() / "other").string());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "was prepared with another tokenizer than checkpoint")) << r.output;
  EXPECT_TRUE(contains(r.output, "(token 2 is \"Q\" in the data's, \"a\" in the checkpoint's)")) << r.output;
}

// Weights that are not finite would sample garbage, evaluate to nan and export: every command
// that loads the checkpoint refuses it, naming the tensor and the previous intact checkpoint.
TEST_F(InferCli, CheckpointWithNonFiniteWeightsIsRefused) {
  const std::string run = run_with_changed_checkpoint([](frugal::GPT& model) {
    model.param("transformer.h.1.mlp.c_fc.weight")[7] = std::numeric_limits<float>::quiet_NaN();
  });
  for (const std::string& command : {"sample " + run, "eval " + run, "export " + run + " " + run + "/hf"}) {
    const CliResult r = run_frugal(command);
    EXPECT_EQ(r.rc, 1) << command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "step_00000002/model.safetensors: tensor "
                                   "'transformer.h.1.mlp.c_fc.weight' holds nan (element 7 of ")) << command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "the previous intact checkpoint is " + run + "/checkpoints/step_00000001")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << command << ": " << r.output;
  }
}

TEST_F(InferCli, TruncatedCheckpointNamesThePreviousIntactOne) {
  const std::string run = run_with_changed_checkpoint([](frugal::GPT&) {});
  const std::string weights = run + "/checkpoints/step_00000002/model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 2);
  const CliResult r = run_frugal("sample " + run);
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "the file is truncated or not a safetensors file; the previous intact "
                                 "checkpoint is " + run + "/checkpoints/step_00000001: pass that directory instead")) << r.output;
  EXPECT_EQ(run_frugal("sample " + run + "/checkpoints/step_00000001 --max-tokens 5").rc, 0);
}

// A damaged `latest` is not echoed to the terminal (it may hold escape sequences): the error
// names the newest intact checkpoint instead.
TEST_F(InferCli, GarbageLatestIsNotPrinted) {
  std::ofstream(run_ / "checkpoints" / "latest") << "\x1b[31m\x01\xff garbage\n";
  const CliResult r = run_frugal("sample " + run_.string());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "checkpoints/latest does not hold a checkpoint name like step_00000100 (the "
                                 "file is damaged); the newest intact checkpoint is " + checkpoint_)) << r.output;
  EXPECT_FALSE(contains(r.output, "\x1b")) << r.output;
  EXPECT_FALSE(contains(r.output, "garbage")) << r.output;
}

}  // namespace

// Generated text and results to a full disk or a closed pipe: one error line, exit code 1.
TEST_F(InferCli, OutputThatCannotBeWrittenIsAnError) {
  for (const std::string& args : {"sample " + checkpoint_ + " --max-tokens 20", "eval " + run_.string() + " --json"}) {
    frugal::testing::expect_unwritable_output_is_an_error(args);
  }
}
