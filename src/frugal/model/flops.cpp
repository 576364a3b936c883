// FLOP formulas; see flops.h.
#include "frugal/model/flops.h"

#include <vector>

namespace frugal {

namespace {

PhaseFlops sum(const std::vector<PhaseFlops>& v) {
  PhaseFlops total;
  for (const PhaseFlops& p : v) total += p;
  return total;
}

double params_in_range(const ParamTable& table, size_t begin, size_t end) {
  double n = 0;
  for (const ParamInfo& e : table.entries())
    if (e.offset >= begin && e.offset < end) n += double(e.numel);
  return n;
}

}  // namespace

PhaseFlops StepFlops::executed_total() const { return sum(executed); }
PhaseFlops StepFlops::dense_total() const { return sum(dense); }

StepFlops count_step_flops(const GPT& model, int B, int T, int cached_prefix_blocks) {
  const ModelConfig& c = model.config();
  const ParamTable& table = model.table();
  const int L = c.n_layer, frozen = model.frozen_prefix();
  const double N = double(B) * T;
  StepFlops f;
  f.executed.resize(L + 2);
  f.dense.resize(L + 2);
  // embeddings: optimizer only
  const auto [emb_begin, emb_end] = table.layer_range(-1);
  f.dense[0].optimizer = 12 * params_in_range(table, emb_begin, emb_end);
  if (frozen == 0) f.executed[0].optimizer = f.dense[0].optimizer;
  for (int l = model.range().begin; l < model.range().end; ++l) {
    const bool runs = l >= cached_prefix_blocks, trains = l >= frozen;
    const ComponentFlops block = model.block(l).flops(B, T, runs, trains);
    f.dense[l + 1] = block.dense;
    f.executed[l + 1] = block.executed;
    const auto [b, end] = table.layer_range(l);
    f.dense[l + 1].optimizer = 12 * params_in_range(table, b, end);
    if (trains) f.executed[l + 1].optimizer = f.dense[l + 1].optimizer;
  }
  if (!model.range().head) return f;
  // the objective (final LayerNorm and head)
  const ComponentFlops head = model.objective().flops(N, !c.tied_head || frozen == 0);
  const auto [hb, he_end] = table.layer_range(L);
  f.dense[L + 1] = head.dense;
  f.executed[L + 1] = head.executed;
  f.dense[L + 1].optimizer = f.executed[L + 1].optimizer = 12 * params_in_range(table, hb, he_end);
  return f;
}

}  // namespace frugal
