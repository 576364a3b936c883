// ParamTable: names, shapes, alignment, contiguous per-layer ranges, parameter counts.
#include <gtest/gtest.h>

#include "frugal/core/error.h"
#include "frugal/model/param_table.h"

using namespace frugal;

TEST(ParamTable, Gpt2SmallHasHuggingFaceNamesAndCount) {
  ModelConfig c;
  c.vocab_size = 50257;
  c.block_size = 1024;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  ParamTable t = ParamTable::build(c);
  EXPECT_EQ(t.num_parameters(), 124439808u);  // GPT-2 small, tied head
  EXPECT_EQ(t.at("transformer.wte.weight").shape, (std::vector<int64_t>{50304, 768}));
  EXPECT_EQ(t.at("transformer.h.11.attn.c_attn.weight").shape, (std::vector<int64_t>{2304, 768}));
  EXPECT_EQ(t.at("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(t.find("lm_head.weight"), nullptr);
}

TEST(ParamTable, TensorsAreAlignedAndLayersContiguous) {
  ModelConfig c;
  c.mlp = MlpKind::Swiglu;
  c.tied_head = false;
  ParamTable t = ParamTable::build(c);
  ASSERT_NE(t.find("transformer.h.2.mlp.c_gate.weight"), nullptr);
  ASSERT_NE(t.find("lm_head.weight"), nullptr);
  size_t prev_end = 0;
  for (const auto& e : t.entries()) {
    EXPECT_EQ(e.offset % 16, 0u) << e.name;
    EXPECT_GE(e.offset, prev_end) << e.name;
    prev_end = e.offset + e.numel;
  }
  for (int l = 0; l + 1 < c.n_layer; ++l) EXPECT_LE(t.layer_range(l).second, t.layer_range(l + 1).first);
}

TEST(ParamTable, InvalidConfigSaysWhatToFix) {
  ModelConfig c;
  c.n_embd = 100;
  c.n_head = 3;
  try {
    ParamTable::build(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_embd"), std::string::npos);
  }
}
