// The transformer block's declarations, layout, forward, backward and FLOPs; see block.h.
#include "frugal/model/block.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

namespace {

std::string block_prefix(int layer) { return fmt::format("transformer.h.{}.", layer); }

// The dropout mask's key of one residual branch (site 0: attention, 1: MLP) of one block.
uint64_t site_key(uint64_t step_key, int layer, int site) {
  return mix64(step_key ^ mix64(static_cast<uint64_t>(layer) * 2 + site + 1));
}

k::GateAct gate_act(MlpKind mlp) { return mlp == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu; }

}  // namespace

void allocate_layout(Buffer<float>& arena, const std::function<void(const Take&)>& lay_out) {
  constexpr size_t A = kAlign / sizeof(float);
  const auto rounded = [](double floats) { return (static_cast<size_t>(floats) + A - 1) / A * A; };
  size_t total = 0;
  lay_out([&](double floats) -> float* {
    total += rounded(floats);
    return nullptr;
  });
  arena.resize(total);
  size_t cursor = 0;
  lay_out([&](double floats) {
    float* piece = arena.data() + cursor;
    cursor += rounded(floats);
    return piece;
  });
}

void TransformerBlock::declare(ModelSpec& spec, int layer) {
  const ModelConfig& c = spec.config();
  const int64_t C = c.n_embd, H = c.ffn_hidden();
  const std::string p = block_prefix(layer);
  using F = Features;
  declare_norm(spec, p + "ln_1", layer);
  declare_linear(spec, p + "attn.c_attn", layer, 3 * C, C, Parallel::Column, {F::Qkv, F::Residual},
                 Init::Normal, 3);
  declare_linear(spec, p + "attn.c_proj", layer, C, C, Parallel::Row, {F::Residual, F::Residual},
                 Init::ResidualNormal);
  declare_norm(spec, p + "ln_2", layer);
  declare_linear(spec, p + "mlp.c_fc", layer, H, C, Parallel::Column, {F::Hidden, F::Residual});
  if (c.gated())
    declare_linear(spec, p + "mlp.c_gate", layer, H, C, Parallel::Column, {F::Hidden, F::Residual});
  declare_linear(spec, p + "mlp.c_proj", layer, C, H, Parallel::Row, {F::Residual, F::Hidden},
                 Init::ResidualNormal);
}

void TransformerBlock::lay_out_internals(const ModelConfig& c, const LocalSizes& s, double N,
                                         const Take& take, BlockActs& a) {
  const double C = c.n_embd, W = s.attn_width, H = s.ffn_hidden;
  a.ln1 = take(N * C);
  a.ln1_mean = take(N);
  a.ln1_rstd = take(N);
  a.qkv = take(3 * N * W);
  a.att = take(N * W);
  a.lse = take(s.n_head * N);
  a.res_mid = take(N * C);
  a.ln2 = take(N * C);
  a.ln2_mean = take(N);
  a.ln2_rstd = take(N);
  a.fc = take(N * H);
  a.gate = c.gated() ? take(N * H) : nullptr;
  a.act = take(N * H);
}

void TransformerBlock::lay_out_scratch(const ModelConfig& c, const LocalSizes& s, double N,
                                       const Take& take, BlockScratch& scratch) {
  const double C = c.n_embd, W = s.attn_width, H = s.ffn_hidden;
  scratch.dln = take(N * C);
  scratch.dqkv = take(3 * N * W);
  scratch.datt = take(N * W);
  scratch.dfc = take(N * H);
  scratch.dgate = c.gated() ? take(N * H) : nullptr;
  scratch.dact = take(N * H);
  scratch.branch = take(N * C);
  scratch.dsum = c.norm == NormPlacement::Post ? take(N * C) : nullptr;
}

BlockActs TransformerBlock::rows(const BlockActs& all, const ModelConfig& c, const LocalSizes& s,
                                 size_t row0) {
  const auto at = [row0](float* t, int width) { return t ? t + row0 * width : nullptr; };
  const int C = c.n_embd, W = s.attn_width, H = s.ffn_hidden;
  return {at(all.ln1, C),      at(all.ln1_mean, 1), at(all.ln1_rstd, 1), at(all.qkv, 3 * W),
          at(all.att, W),      at(all.lse, s.n_head), at(all.res_mid, C), at(all.ln2, C),
          at(all.ln2_mean, 1), at(all.ln2_rstd, 1), at(all.fc, H),       at(all.gate, H),
          at(all.act, H),      at(all.res_out, C)};
}

TransformerBlock::TransformerBlock(const ModelConfig& config, const ShardCoord& shard, int layer,
                                   const ParamTable& table, std::shared_ptr<LinearFormat> dense)
    : config_(config), sizes_(LocalSizes::of(config, shard)), layer_(layer), lead_(shard.rank == 0) {
  const std::string p = block_prefix(layer);
  auto off = [&](const std::string& name) {
    const ParamInfo* e = table.find(p + name);
    return e ? e->offset : kAbsent;
  };
  ln1_w_ = off("ln_1.weight");
  ln1_b_ = off("ln_1.bias");
  ln2_w_ = off("ln_2.weight");
  ln2_b_ = off("ln_2.bias");
  const std::array<const char*, kBlockLinears> names = {"attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                        "mlp.c_gate", "mlp.c_proj"};
  for (int i = 0; i < kBlockLinears; ++i)
    linears_[i] = {off(std::string(names[i]) + ".weight"), off(std::string(names[i]) + ".bias"), dense};
}

std::pair<int, int> TransformerBlock::linear_shape(BlockLinear which) const {
  const int C = config_.n_embd, W = sizes_.attn_width, H = sizes_.ffn_hidden;
  switch (which) {
    case BlockLinear::Qkv: return {3 * W, C};
    case BlockLinear::Proj: return {C, W};
    case BlockLinear::Fc:
    case BlockLinear::Gate: return {H, C};
    case BlockLinear::FcProj: return {C, H};
  }
  return {0, 0};
}

bool TransformerBlock::set_format(BlockLinear which, std::shared_ptr<LinearFormat> format) {
  std::shared_ptr<LinearFormat>& slot = linears_[int(which)].format;
  const bool changed = slot != format;
  slot = std::move(format);
  return changed;
}

bool TransformerBlock::reentrant_forward() const {
  for (const Linear& l : linears_)
    if (l.weight != kAbsent && !l.format->reentrant_forward()) return false;
  return true;
}

void TransformerBlock::linear_forward(const float* params, BlockLinear which, float* out,
                                      const float* inp, int N, bool with_bias) const {
  const Linear& l = linears_[int(which)];
  const auto [OC, IC] = linear_shape(which);
  const float* bias = with_bias && l.bias != kAbsent ? params + l.bias : nullptr;
  l.format->forward(out, inp, params + l.weight, bias, N, IC, OC);
}

void TransformerBlock::linear_backward(const float* params, float* grads, BlockLinear which,
                                       float* dinp, const float* dout, const float* inp, int N,
                                       bool accumulate_dinp) const {
  const Linear& l = linears_[int(which)];
  const auto [OC, IC] = linear_shape(which);
  l.format->backward(dinp, grads + l.weight, l.bias != kAbsent ? grads + l.bias : nullptr, dout, inp,
                     params + l.weight, N, IC, OC, accumulate_dinp);
}

void TransformerBlock::forward(const float* params, const BlockActs& a, const float* x, float* branch,
                               int B, int T, const Dropout& dropout, TensorCollectives& comm,
                               const KvCache* cache) const {
  const int C = config_.n_embd, W = sizes_.attn_width, NH = sizes_.n_head, N = B * T;
  const size_t NC = size_t(N) * C, NHid = size_t(N) * sizes_.ffn_hidden;
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  // A row-parallel linear's partial products meet in the sum; its bias is added once.
  const auto row_parallel_forward = [&](BlockLinear which, const float* inp) {
    linear_forward(params, which, branch, inp, N, lead_);
    comm.all_reduce_sum(branch, NC);
  };
  const bool post = config_.norm == NormPlacement::Post;
  const float eps = config_.layernorm_eps;
  // attention branch, on ln_1(x) (pre-LN) or on x (post-LN)
  if (!post) k::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(ln1_w_), P(ln1_b_), N, C, eps);
  linear_forward(params, BlockLinear::Qkv, a.qkv, post ? x : a.ln1, N);
  if (!cache) {
    k::attention_forward(a.att, a.lse, a.qkv, B, T, W, NH, pattern_);
  } else {
    FRUGAL_CHECK(B == 1 && (cache->pos0 == 0 || T == 1),
                 "internal: decoding runs one window: a prefill from position 0 or one new row");
    for (int i = 0; i < T; ++i) {  // qkv row i = [q | k | v] -> cache row pos0 + i
      const float* row = a.qkv + size_t(i) * 3 * W;
      std::memcpy(cache->keys + size_t(cache->pos0 + i) * W, row + W, sizeof(float) * W);
      std::memcpy(cache->values + size_t(cache->pos0 + i) * W, row + 2 * W, sizeof(float) * W);
    }
    if (cache->pos0 == 0)
      k::attention_forward(a.att, a.lse, a.qkv, 1, T, W, NH, pattern_);
    else
      k::attention_decode(a.att, a.qkv, cache->keys, cache->values, cache->pos0 + 1, W, NH, pattern_);
  }
  row_parallel_forward(BlockLinear::Proj, a.att);
  k::dropout_apply(branch, NC, dropout.p, site_key(dropout.step_key, layer_, 0), dropout.first);
  k::residual_forward(a.res_mid, x, branch, NC);
  // MLP branch, on h: ln_2(res_mid) (pre-LN) or ln_1(res_mid) (post-LN)
  const float* h = a.res_mid;
  float* mlp_in = a.ln2;
  if (post) {
    k::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.res_mid, P(ln1_w_), P(ln1_b_), N, C, eps);
    h = mlp_in = a.ln1;
  } else {
    k::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, P(ln2_w_), P(ln2_b_), N, C, eps);
  }
  linear_forward(params, BlockLinear::Fc, a.fc, mlp_in, N);
  if (config_.gated()) {
    linear_forward(params, BlockLinear::Gate, a.gate, mlp_in, N);
    k::gated_forward(a.act, a.gate, a.fc, NHid, gate_act(config_.mlp));
  } else {
    k::gelu_forward(a.act, a.fc, NHid);
  }
  row_parallel_forward(BlockLinear::FcProj, a.act);
  k::dropout_apply(branch, NC, dropout.p, site_key(dropout.step_key, layer_, 1), dropout.first);
  if (post) {
    k::residual_forward(a.ln2, h, branch, NC);
    k::layernorm_forward(a.res_out, a.ln2_mean, a.ln2_rstd, a.ln2, P(ln2_w_), P(ln2_b_), N, C, eps);
  } else {
    k::residual_forward(a.res_out, h, branch, NC);
  }
}

void TransformerBlock::backward(const float* params, float* grads, const BlockActs& a, const float* x,
                                float* dres, const BlockScratch& s, int B, int T,
                                const Dropout& dropout, bool need_dinp, TensorCollectives& comm) const {
  const int C = config_.n_embd, W = sizes_.attn_width, NH = sizes_.n_head, N = B * T;
  const size_t NC = size_t(N) * C, NHid = size_t(N) * sizes_.ffn_hidden;
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  const auto G = [grads](size_t off) { return off == kAbsent ? nullptr : grads + off; };
  const bool post = config_.norm == NormPlacement::Post;
  // Post-LN: d loss / d (h + MLP branch), through ln_2, is what the MLP branch and h receive.
  float* dout = dres;
  if (post) {
    std::memset(s.dsum, 0, sizeof(float) * NC);
    k::layernorm_backward(s.dsum, G(ln2_w_), G(ln2_b_), dres, a.ln2, P(ln2_w_), a.ln2_mean, a.ln2_rstd, N, C);
    dout = s.dsum;
  }
  // d(branch) = the dropout mask applied to the gradient reaching the residual sum
  const auto branch_grad = [&](const float* dsum, int site) -> const float* {
    if (dropout.p <= 0.0f) return dsum;
    std::memcpy(s.branch, dsum, sizeof(float) * NC);
    k::dropout_apply(s.branch, NC, dropout.p, site_key(dropout.step_key, layer_, site));
    return s.branch;
  };
  // MLP branch; the column-parallel linears' input gradients are partial sums over the group
  const float* mlp_in = post ? a.ln1 : a.ln2;
  const float* dmlp = branch_grad(dout, 1);
  linear_backward(params, grads, BlockLinear::FcProj, s.dact, dmlp, a.act, N, false);
  if (config_.gated()) {
    k::gated_backward(s.dgate, s.dfc, s.dact, a.gate, a.fc, NHid, gate_act(config_.mlp));
    linear_backward(params, grads, BlockLinear::Fc, s.dln, s.dfc, mlp_in, N, false);
    linear_backward(params, grads, BlockLinear::Gate, s.dln, s.dgate, mlp_in, N, true);
  } else {
    k::gelu_backward(s.dfc, s.dact, a.fc, NHid);
    linear_backward(params, grads, BlockLinear::Fc, s.dln, s.dfc, mlp_in, N, false);
  }
  comm.all_reduce_sum(s.dln, NC);
  if (post) {
    // d h = the branch's + the residual's; through ln_1 to d (x + attention branch), in dres
    k::residual_forward(s.dln, s.dln, s.dsum, NC);
    std::memset(dres, 0, sizeof(float) * NC);
    k::layernorm_backward(dres, G(ln1_w_), G(ln1_b_), s.dln, a.res_mid, P(ln1_w_), a.ln1_mean,
                          a.ln1_rstd, N, C);
  } else {
    k::layernorm_backward(dres, G(ln2_w_), G(ln2_b_), s.dln, a.res_mid, P(ln2_w_), a.ln2_mean,
                          a.ln2_rstd, N, C);
  }
  // attention branch
  const float* dattn = branch_grad(dres, 0);
  linear_backward(params, grads, BlockLinear::Proj, s.datt, dattn, a.att, N, false);
  k::attention_backward(s.dqkv, s.datt, a.qkv, a.att, a.lse, B, T, W, NH, pattern_);
  linear_backward(params, grads, BlockLinear::Qkv, s.dln, s.dqkv, post ? x : a.ln1, N, false);
  comm.all_reduce_sum(s.dln, NC);
  if (post) {
    if (need_dinp) k::residual_forward(dres, dres, s.dln, NC);
  } else {
    k::layernorm_backward(need_dinp ? dres : nullptr, G(ln1_w_), G(ln1_b_), s.dln, x, P(ln1_w_),
                          a.ln1_mean, a.ln1_rstd, N, C);
  }
}

ComponentFlops TransformerBlock::flops(int B, int T, bool runs, bool trains) const {
  const double N = double(B) * T;
  // attention: q·kᵀ and p·v, 2·HS each, per allowed (query, key) pair
  const double per_pair = 4.0 * B * sizes_.n_head * sizes_.head_size;
  const double causal = per_pair * double(kernels::AttentionPattern::causal().pairs(T));
  const double attention = per_pair * double(pattern_.pairs(T));
  ComponentFlops f;
  PhaseFlops &d = f.dense, &e = f.executed;
  d.forward = causal;
  d.backward_input = 2 * causal;
  for (int i = 0; i < kBlockLinears; ++i) {
    const auto which = static_cast<BlockLinear>(i);
    if (weight_offset(which) == kAbsent) continue;
    const auto [oc, ic] = linear_shape(which);
    const double dense = 2 * N * oc * ic;
    const LinearFormat& fmt = format(which);
    d.forward += dense;
    d.backward_input += dense;
    d.backward_weight += dense;
    if (runs) e.forward += dense * fmt.forward_density();
    if (trains) {
      e.backward_input += dense * fmt.backward_input_density();
      e.backward_weight += dense * fmt.weight_grad_density();
    }
  }
  if (runs) e.forward += attention;
  if (trains) e.backward_input += 2 * attention;
  return f;
}

}  // namespace frugal
