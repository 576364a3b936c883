// FLOP formulas; see flops.h.
#include "frugal/model/flops.h"

#include <vector>

namespace frugal {

PhaseFlops& PhaseFlops::operator+=(const PhaseFlops& o) {
  forward += o.forward;
  backward_input += o.backward_input;
  backward_weight += o.backward_weight;
  optimizer += o.optimizer;
  return *this;
}

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
  // blocks; attention: q·kᵀ and p·v, 2·HS each, per allowed (query, key) pair
  const double per_pair = 4.0 * B * c.n_head * c.head_size();
  const double causal = per_pair * double(kernels::AttentionPattern::causal().pairs(T));
  for (int l = model.range().begin; l < model.range().end; ++l) {
    PhaseFlops& d = f.dense[l + 1];
    PhaseFlops& e = f.executed[l + 1];
    const double attention = per_pair * double(model.attention_pattern(l).pairs(T));
    const bool runs = l >= cached_prefix_blocks, trains = l >= frozen;
    d.forward = causal;
    d.backward_input = 2 * causal;
    for (int i = 0; i < GPT::kLinears; ++i) {
      const auto which = static_cast<GPT::Linear>(i);
      if (model.linear_weight_offset(l, which) == GPT::kAbsent) continue;
      const auto [oc, ic] = model.linear_shape(which);
      const double dense = 2 * N * oc * ic;
      const LinearFormat& format = model.linear_format(l, which);
      d.forward += dense;
      d.backward_input += dense;
      d.backward_weight += dense;
      if (runs) e.forward += dense * format.forward_density();
      if (trains) {
        e.backward_input += dense * format.backward_input_density();
        e.backward_weight += dense * format.weight_grad_density();
      }
    }
    if (runs) e.forward += attention;
    if (trains) e.backward_input += 2 * attention;
    const auto [b, end] = table.layer_range(l);
    d.optimizer = 12 * params_in_range(table, b, end);
    if (trains) e.optimizer = d.optimizer;
  }
  if (!model.range().head) return f;
  // final LayerNorm and head
  PhaseFlops& hd = f.dense[L + 1];
  PhaseFlops& he = f.executed[L + 1];
  const double head = 2 * N * c.n_embd * double(c.vocab_size);
  hd.forward = hd.backward_input = hd.backward_weight = head;
  const auto [hb, he_end] = table.layer_range(L);
  hd.optimizer = 12 * params_in_range(table, hb, he_end);
  he.forward = head;
  he.backward_input = head;  // the final LayerNorm's gradient needs it even with every block frozen
  const bool head_trains = !c.tied_head || frozen == 0;
  he.backward_weight = head_trains ? head : 0;
  he.optimizer = hd.optimizer;
  return f;
}

}  // namespace frugal
