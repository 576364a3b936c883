// Every shipped config in configs/ parses against the schema and builds a valid model; `frugal
// config` refuses what `frugal train` refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "frugal/train/run_config.h"
#include "paths.h"
#include "run_cli.h"

using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::run_frugal;

TEST(ShippedConfigs, ParseAndDescribeValidModels) {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(test_paths::source_dir()) + "/configs")) {
    if (e.path().extension() != ".toml") continue;
    ++seen;
    SCOPED_TRACE(e.path().string());
    const frugal::io::Config c = frugal::io::Config::load(frugal::run_schema(), e.path().string());
    EXPECT_NO_THROW(frugal::run_settings(c));  // validates the model, seq_len, recompute, methods
  }
  EXPECT_GE(seen, 3);
}

// `frugal config` prints only configs `frugal train` accepts: both refuse these with one error
// line (train before it looks at the data).
TEST(ConfigCli, RefusesWhatTrainRefuses) {
  const std::pair<std::string, std::string> cases[] = {
      {"model.n_head=3", "model.n_embd = 128 must be a positive multiple of model.n_head = 3"},
      {"model.vocab_size=1", "model.vocab_size = 1 is too small"},
      {"train.seq_len=999", "train.seq_len = 999 exceeds model.block_size = 256"},
      {"train.recompute=0,9", "train.recompute = \"0,9\": \"9\" is not a block index"},
      {"methods.freeze.frozen_layers=9", "methods.freeze.frozen_layers = 9 exceeds model.n_layer = 4"},
  };
  for (const auto& [setting, message] : cases) {
    const CliResult config = run_frugal("config --set " + setting);
    EXPECT_EQ(config.rc, 1) << setting << ": " << config.output;
    EXPECT_TRUE(contains(config.output, message)) << setting << ": " << config.output;
    EXPECT_EQ(std::count(config.output.begin(), config.output.end(), '\n'), 1) << config.output;
    const CliResult train = run_frugal("train /dev/null --set data.dir=/nonexistent --set " + setting);
    EXPECT_EQ(train.output, config.output) << setting;
  }
}
