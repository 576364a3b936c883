// ParamTable: names, shapes, alignment, contiguous per-layer ranges, parameter counts.
#include <gtest/gtest.h>

#include "frugal/core/error.h"
#include "frugal/model/flops.h"
#include "frugal/model/gpt.h"
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

// A mixture of experts on every other block (8 experts of 256 units, top 2) against the dense
// model whose MLP has the 2 · 256 units a token runs through: the parameter table holds every
// expert, the active count 2 of 8 of them, neither the balancing bias (a buffer); the FLOPs are
// the dense model's plus the router's (2·N·E·C per product and block).
TEST(ParamTable, MixtureOfExpertsCountsTotalAndActiveParametersAndFlops) {
  ModelConfig dense;
  dense.ffn_mult = 4;  // 512 hidden units at n_embd 128
  ModelConfig moe = dense;
  moe.moe.experts = 8, moe.moe.top_k = 2, moe.moe.hidden = 256, moe.moe.every = 2;
  const ParamTable d = ParamTable::build(dense), m = ParamTable::build(moe);
  EXPECT_EQ(m.at("transformer.h.1.mlp.experts.c_fc.weight").shape, (std::vector<int64_t>{8, 256, 128}));
  EXPECT_EQ(m.at("transformer.h.3.mlp.experts.c_proj.bias").shape, (std::vector<int64_t>{8, 128}));
  EXPECT_EQ(m.find("transformer.h.2.mlp.router.weight"), nullptr);
  ASSERT_NE(m.find("transformer.h.3.mlp.router.balance_bias"), nullptr);
  const size_t expert = 256 * 128 * 2 + 256 + 128, router = 8 * 128;
  EXPECT_EQ(m.num_active_parameters(2), d.num_parameters() + 2 * (router + 128));  // + each expert's c_proj bias
  EXPECT_EQ(m.num_parameters() - m.num_active_parameters(2), 2 * 6 * expert);
  EXPECT_EQ(d.num_active_parameters(2), d.num_parameters());

  const int B = 2, T = 32;
  const PhaseFlops fd = count_step_flops(GPT(dense), B, T).executed_total();
  const PhaseFlops fm = count_step_flops(GPT(moe), B, T).executed_total();
  const double routers = 2 * (2.0 * B * T * 8 * 128);
  EXPECT_DOUBLE_EQ(fm.forward, fd.forward + routers);
  EXPECT_DOUBLE_EQ(fm.backward_input, fd.backward_input + routers);
  EXPECT_DOUBLE_EQ(fm.backward_weight, fd.backward_weight + routers);
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
