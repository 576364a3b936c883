// Mixture-of-experts MLP against the dense MLP of the same active FLOPs; see moe_ffn.h.
#include "frugal/bench/moe_ffn.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "frugal/bench/step_shapes.h"
#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/rng.h"
#include "frugal/core/timer.h"
#include "frugal/model/formats/dense.h"
#include "frugal/model/gpt.h"
#include "frugal/model/moe.h"

namespace frugal::bench {
namespace {

const PresetShape& preset_named(const std::string& name) {
  for (const PresetShape& p : kPresets)
    if (name == p.name) return p;
  fail("internal: no preset {}", name);
}

void fill_normal(Buffer<float>& b, uint64_t seed) {
  Rng rng(seed, 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rng.normal());
}

// One MLP of a one-block model with its weights, activations, input and output gradient; step()
// runs its forward and backward.
struct MlpUnderTest {
  GPT model;
  std::unique_ptr<FeedForward> mlp;
  Buffer<float> arena, x, out, dout, din;
  FeedForward::Acts acts{};
  FeedForward::Scratch scratch{};
  SoloCollectives solo;
  int N;
  MlpUnderTest(const ModelConfig& c, int rows) : model(c), N(rows) {
    model.init_weights(1);
    const auto dense = std::make_shared<DenseFormat>();
    const LocalSizes sizes = LocalSizes::of(c, {});
    const std::string prefix = "transformer.h.0.mlp.";
    if (c.moe.on(0))
      mlp = std::make_unique<MoeMlp>(c, sizes, ShardCoord{}, prefix, model.table(), dense);
    else
      mlp = std::make_unique<DenseMlp>(c, sizes, prefix, model.table(), dense);
    allocate_layout(arena, [&](const Take& take) {
      mlp->lay_out(N, take, acts, kernels::DType::F32);
      mlp->lay_out_scratch(N, take, scratch);
    });
    for (Buffer<float>* b : {&x, &out, &dout, &din}) b->resize(size_t(N) * c.n_embd);
    fill_normal(x, 2);
    fill_normal(dout, 3);
  }
  FeedForward::Report step() {
    FeedForward::Report report = mlp->forward(model.params(), acts, {x.data()}, out.data(), N, true, solo);
    mlp->backward(model.params(), model.grads(), acts, {x.data()}, dout.data(), din.data(), scratch, N, 1.0f, solo);
    return report;
  }
};

MoeBenchRow bench_preset(const PresetShape& p, const MoeBenchOptions& o) {
  ModelConfig c;
  c.vocab_size = p.V, c.block_size = p.T, c.n_layer = 1, c.n_head = p.heads, c.n_embd = p.C;
  ModelConfig moe = c;
  moe.moe.experts = o.experts, moe.moe.top_k = o.top_k, moe.moe.hidden = c.ffn_hidden() / o.top_k;
  MlpUnderTest dense(c, p.rows()), mixture(moe, p.rows());
  const FeedForward::Report report = mixture.step();
  dense.step();
  std::vector<double> dense_ms, moe_ms;
  for (int r = 0; r < o.repeats; ++r) {
    dense_ms.push_back(time_ms([&] { dense.step(); }));
    moe_ms.push_back(time_ms([&] { mixture.step(); }));
  }
  MoeBenchRow row{p.name, p.rows(), p.C, o.experts, o.top_k, moe.expert_hidden(), c.ffn_hidden()};
  row.dense_ms = median(dense_ms);
  row.moe_ms = median(moe_ms);
  const int64_t most = *std::max_element(report.load.begin(), report.load.end());
  row.max_over_mean_load = double(most) * o.experts / (double(p.rows()) * o.top_k);
  return row;
}

}  // namespace

std::vector<MoeBenchRow> run_moe_benchmark(const MoeBenchOptions& options) {
  std::vector<MoeBenchRow> rows;
  for (const char* name : options.presets) rows.push_back(bench_preset(preset_named(name), options));
  return rows;
}

std::string format_moe_table(const std::vector<MoeBenchRow>& rows) {
  std::string s = fmt::format("MLP fwd+bwd: E experts of H/k hidden units, top k, vs dense H = 4C (same active FLOPs)\n"
                              "{:>6} {:>5} {:>4} {:>3} {:>3} {:>6} {:>9} {:>9} {:>14} {:>9}\n", "preset", "N", "C",
                              "E", "k", "H/k", "dense ms", "MoE ms", "MoE/dense tok/s", "max/mean");
  for (const auto& r : rows)
    s += fmt::format("{:>6} {:>5} {:>4} {:>3} {:>3} {:>6} {:>9.3f} {:>9.3f} {:>14.2f} {:>9.2f}\n", r.preset, r.N, r.C,
                     r.experts, r.top_k, r.expert_hidden, r.dense_ms, r.moe_ms, r.ratio(), r.max_over_mean_load);
  return s;
}

nlohmann::json moe_rows_to_json(const std::vector<MoeBenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"preset", r.preset}, {"N", r.N}, {"C", r.C}, {"experts", r.experts}, {"top_k", r.top_k},
                   {"expert_hidden", r.expert_hidden}, {"dense_hidden", r.dense_hidden}, {"dense_ms", r.dense_ms},
                   {"moe_ms", r.moe_ms}, {"ratio", r.ratio()}, {"max_over_mean_load", r.max_over_mean_load}});
  return out;
}

}  // namespace frugal::bench
