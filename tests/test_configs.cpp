// Every shipped config in configs/ parses against the schema and builds a valid model.
#include <gtest/gtest.h>

#include <filesystem>

#include "frugal/model/param_table.h"
#include "frugal/train/run_config.h"

TEST(ShippedConfigs, ParseAndDescribeValidModels) {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FRUGAL_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".toml") continue;
    ++seen;
    SCOPED_TRACE(e.path().string());
    const frugal::io::Config c = frugal::io::Config::load(frugal::run_schema(), e.path().string());
    frugal::RunSettings s = frugal::run_settings(c);
    if (s.model.vocab_size == 0) s.model.vocab_size = 50257;  // taken from the data at run time
    EXPECT_NO_THROW(s.model.validate());
    EXPECT_LE(s.train.seq_len, s.model.block_size);
  }
  EXPECT_GE(seen, 3);
}
