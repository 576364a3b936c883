// AdamW against hand-computed values: which tensor kinds take decoupled weight decay, and the
// frozen prefix the update leaves alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "frugal/model/param_table.h"
#include "frugal/optim/adamw.h"

using namespace frugal;

namespace {

// Every tensor kind: biases, LayerNorm gains and biases, a gated MLP and an untied head.
ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 11, c.block_size = 4, c.n_layer = 2, c.n_head = 1, c.n_embd = 8;
  c.mlp = MlpKind::Swiglu, c.tied_head = false, c.bias = true;
  return c;
}

}  // namespace

// With zero gradients Adam's step is 0 / (0 + eps) = 0, so one update leaves exactly the decay:
// p ← p · (1 − lr·wd) = 1 · (1 − 0.5·0.4) = 0.8 on decaying tensors, p = 1 elsewhere.
TEST(AdamW, DecoupledDecayOnlyOnLinearWeightsEmbeddingsAndHead) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.lr = 0.5f, oc.weight_decay = 0.4f, oc.grad_clip = 0;
  AdamW optim(table, oc);
  std::vector<float> params(table.total(), 1.0f), grads(table.total(), 0.0f);
  optim.update(params.data(), grads.data(), 0, oc.lr);
  // Written out by hand rather than from ParamInfo::decays(), which this test checks.
  const std::vector<std::string> decaying = {
      "transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"};
  const std::vector<std::string> block_decaying = {"attn.c_attn.weight", "attn.c_proj.weight",
                                                   "mlp.c_fc.weight", "mlp.c_gate.weight",
                                                   "mlp.c_proj.weight"};
  size_t checked = 0;
  for (const ParamInfo& e : table.entries()) {
    bool decays = std::find(decaying.begin(), decaying.end(), e.name) != decaying.end();
    for (const std::string& suffix : block_decaying) decays |= e.name.ends_with(suffix);
    for (size_t i = 0; i < e.numel; ++i) ASSERT_EQ(params[e.offset + i], decays ? 0.8f : 1.0f) << e.name;
    checked += decays;
  }
  EXPECT_EQ(checked, 3u + 2 * block_decaying.size());
  EXPECT_EQ(table.entries().size(), checked + 2 * 9 + 2) << "5 biases and 4 norm tensors per block, ln_f's 2";
}

// Tensors starting before `begin` (a frozen prefix) are neither decayed nor moved.
TEST(AdamW, UpdateLeavesTheFrozenPrefixAlone) {
  const ParamTable table = ParamTable::build(small_config());
  AdamWConfig oc;
  oc.lr = 0.5f, oc.weight_decay = 0.4f, oc.grad_clip = 0;
  AdamW optim(table, oc);
  std::vector<float> params(table.total(), 1.0f), grads(table.total(), 0.25f);
  const size_t begin = table.layer_range(1).first;
  optim.update(params.data(), grads.data(), begin, oc.lr);
  for (const ParamInfo& e : table.entries())
    if (e.offset < begin) {
      ASSERT_EQ(params[e.offset], 1.0f) << e.name;
    } else {
      ASSERT_NE(params[e.offset], 1.0f) << e.name;
    }
}
