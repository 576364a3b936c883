// The transformer block: its norms, residual sums and dropout around the branches; see block.h.
#include "frugal/model/block.h"

#include <fmt/format.h>

#include <cstring>

#include "frugal/core/rng.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

namespace {

std::string block_prefix(int layer) { return fmt::format("transformer.h.{}.", layer); }
std::string mlp_prefix(int layer) { return block_prefix(layer) + "mlp."; }

// The dropout mask's key of one residual branch (site 0: attention, 1: MLP) of one block.
uint64_t site_key(uint64_t step_key, int layer, int site) {
  return mix64(step_key ^ mix64(static_cast<uint64_t>(layer) * 2 + site + 1));
}

}  // namespace

void TransformerBlock::declare(ModelSpec& spec, int layer) {
  const std::string p = block_prefix(layer);
  declare_norm(spec, p + "ln_1", layer);
  Attention::declare(spec, p, layer);
  declare_norm(spec, p + "ln_2", layer);
  if (spec.config().moe.on(layer))
    MoeMlp::declare(spec, mlp_prefix(layer), layer);
  else
    DenseMlp::declare(spec, mlp_prefix(layer), layer, spec.config().ffn_hidden());
}

TransformerBlock::TransformerBlock(const ModelConfig& config, const ShardCoord& shard, int layer,
                                   const ParamTable& table, const std::shared_ptr<LinearFormat>& dense)
    : config_(config),
      sizes_(LocalSizes::of(config, shard)),
      layer_(layer),
      lead_(shard.rank == 0),
      attention_(config, sizes_, block_prefix(layer), table, dense) {
  if (config.moe.on(layer)) {
    auto moe = std::make_unique<MoeMlp>(config, sizes_, shard, mlp_prefix(layer), table, dense);
    moe_ = moe.get();
    mlp_ = std::move(moe);
  } else {
    mlp_ = std::make_unique<DenseMlp>(config, sizes_, mlp_prefix(layer), table, dense);
  }
  const std::string p = block_prefix(layer);
  ln1_w_ = table.offset_of(p + "ln_1.weight");
  ln1_b_ = table.offset_of(p + "ln_1.bias");
  ln2_w_ = table.offset_of(p + "ln_2.weight");
  ln2_b_ = table.offset_of(p + "ln_2.bias");
}

void TransformerBlock::lay_out_internals(double N, const Take& take, BlockActs& a, kernels::DType dtype) const {
  const double C = config_.n_embd;
  const bool bf16 = dtype == kernels::DType::BF16, post = config_.norm == NormPlacement::Post;
  // ln1 feeds the qkv projection (pre-LN) or is h, the MLP's input and residual (post-LN); ln2 feeds
  // the MLP (pre-LN) or is the sum before ln_2 (post-LN)
  const bool ln1_16 = bf16 && (!post || mlp_->bf16_input()), ln2_16 = bf16 && !post && mlp_->bf16_input();
  a.ln1 = ln1_16 && !post ? nullptr : take(N * C);
  a.ln1_16 = ln1_16 ? take_bf16(take, N * C) : nullptr;
  a.ln1_mean = take(N);
  a.ln1_rstd = take(N);
  attention_.lay_out(N, take, a.attn, dtype);
  a.res_mid = take(N * C);
  a.ln2 = ln2_16 ? nullptr : take(N * C);
  a.ln2_16 = ln2_16 ? take_bf16(take, N * C) : nullptr;
  a.ln2_mean = take(N);
  a.ln2_rstd = take(N);
  mlp_->lay_out(N, take, a.mlp, dtype);
}

void TransformerBlock::lay_out_scratch(double N, const Take& take, BlockScratch& scratch) const {
  const double C = config_.n_embd;
  scratch.dln = take(N * C);
  attention_.lay_out_scratch(N, take, scratch.attn);
  mlp_->lay_out_scratch(N, take, scratch.mlp);
  scratch.branch = take(N * C);
  scratch.dsum = config_.norm == NormPlacement::Post ? take(N * C) : nullptr;
}

BlockActs TransformerBlock::rows(const BlockActs& all, size_t row0) const {
  const size_t C = config_.n_embd;
  const auto at = [](auto* p, size_t off) { return p ? p + off : nullptr; };
  return {at(all.ln1, row0 * C),  all.ln1_mean + row0,    all.ln1_rstd + row0,
          attention_.rows(all.attn, row0),
          all.res_mid + row0 * C, at(all.ln2, row0 * C),  all.ln2_mean + row0, all.ln2_rstd + row0,
          mlp_->rows(all.mlp, row0),
          all.res_out + row0 * C, at(all.ln1_16, row0 * C), at(all.ln2_16, row0 * C)};
}

const LinearSlot& TransformerBlock::linear(BlockLinear which) const {
  return which == BlockLinear::Qkv || which == BlockLinear::Proj ? attention_.linear(which) : mlp_->linear(which);
}

LinearSlot& TransformerBlock::linear(BlockLinear which) {
  return which == BlockLinear::Qkv || which == BlockLinear::Proj ? attention_.linear(which) : mlp_->linear(which);
}

bool TransformerBlock::set_format(BlockLinear which, std::shared_ptr<LinearFormat> format) {
  std::shared_ptr<LinearFormat>& slot = linear(which).format;
  const bool changed = slot != format;
  slot = std::move(format);
  return changed;
}

bool TransformerBlock::reentrant_forward() const {
  for (int i = 0; i < kBlockLinears; ++i) {
    const LinearSlot& l = linear(static_cast<BlockLinear>(i));
    if (l.present() && !l.format->reentrant_forward()) return false;
  }
  return true;
}

FeedForward::Report TransformerBlock::forward(const float* params, const BlockActs& a, const float* x,
                                              float* branch, int B, int T, const Dropout& dropout,
                                              TensorCollectives& comm, const KvCache* cache) const {
  const int C = config_.n_embd, N = B * T;
  const size_t NC = size_t(N) * C;
  const float eps = config_.layernorm_eps;
  const bool post = config_.norm == NormPlacement::Post;
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  // out (fp32) and/or out16 (bf16) = a LayerNorm of in, keeping its mean and rstd
  const auto layernorm = [&](float* out, k::bf16* out16, float* mean, float* rstd, const float* in, size_t w,
                             size_t b) {
    if (out16)
      k::layernorm_forward_bf16(out16, out, mean, rstd, in, P(w), P(b), N, C, eps);
    else
      k::layernorm_forward(out, mean, rstd, in, P(w), P(b), N, C, eps);
  };
  // attention branch, on ln_1(x) (pre-LN) or on x (post-LN)
  if (!post) layernorm(a.ln1, a.ln1_16, a.ln1_mean, a.ln1_rstd, x, ln1_w_, ln1_b_);
  attention_.forward(params, a.attn, post ? LinearInput{x} : LinearInput{a.ln1, a.ln1_16}, branch, B, T, lead_,
                     comm, cache);
  k::dropout_apply(branch, NC, dropout.p, site_key(dropout.step_key, layer_, 0), dropout.first);
  k::residual_forward(a.res_mid, x, branch, NC);
  // MLP branch, on h: ln_2(res_mid) (pre-LN; h = res_mid) or h = ln_1(res_mid) (post-LN)
  const float* h = a.res_mid;
  LinearInput mlp_in{a.ln2, a.ln2_16};
  if (post) {
    layernorm(a.ln1, a.ln1_16, a.ln1_mean, a.ln1_rstd, a.res_mid, ln1_w_, ln1_b_);
    h = a.ln1;
    mlp_in = {a.ln1, a.ln1_16};
  } else {
    layernorm(a.ln2, a.ln2_16, a.ln2_mean, a.ln2_rstd, a.res_mid, ln2_w_, ln2_b_);
  }
  FeedForward::Report report = mlp_->forward(params, a.mlp, mlp_in, branch, N, lead_, comm);
  k::dropout_apply(branch, NC, dropout.p, site_key(dropout.step_key, layer_, 1), dropout.first);
  if (post) {
    k::residual_forward(a.ln2, h, branch, NC);
    k::layernorm_forward(a.res_out, a.ln2_mean, a.ln2_rstd, a.ln2, P(ln2_w_), P(ln2_b_), N, C, eps);
  } else {
    k::residual_forward(a.res_out, h, branch, NC);
  }
  return report;
}

void TransformerBlock::backward(const float* params, float* grads, const BlockActs& a, const float* x,
                                float* dres, const BlockScratch& s, int B, int T,
                                const Dropout& dropout, bool need_dinp, float aux_scale,
                                TensorCollectives& comm) const {
  const int C = config_.n_embd, N = B * T;
  const size_t NC = size_t(N) * C;
  const bool post = config_.norm == NormPlacement::Post;
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  const auto G = [grads](size_t off) { return off == kAbsent ? nullptr : grads + off; };
  // d(branch) = the dropout mask applied to the gradient reaching the residual sum
  const auto branch_grad = [&](const float* dsum, int site) -> const float* {
    if (dropout.p <= 0.0f) return dsum;
    std::memcpy(s.branch, dsum, sizeof(float) * NC);
    k::dropout_apply(s.branch, NC, dropout.p, site_key(dropout.step_key, layer_, site));
    return s.branch;
  };
  // Post-LN: d loss / d (h + MLP branch), through ln_2, is what the MLP branch and h receive.
  const float* dout = dres;
  if (post) {
    std::memset(s.dsum, 0, sizeof(float) * NC);
    k::layernorm_backward(s.dsum, G(ln2_w_), G(ln2_b_), dres, a.ln2, P(ln2_w_), a.ln2_mean, a.ln2_rstd, N, C);
    dout = s.dsum;
  }
  // MLP branch: d loss / d its input into dln
  mlp_->backward(params, grads, a.mlp, post ? LinearInput{a.ln1, a.ln1_16} : LinearInput{a.ln2, a.ln2_16},
                 branch_grad(dout, 1), s.dln, s.mlp, N, aux_scale, comm);
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
  // attention branch: d loss / d its input into dln
  attention_.backward(params, grads, a.attn, post ? LinearInput{x} : LinearInput{a.ln1, a.ln1_16},
                      branch_grad(dres, 0), s.dln, s.attn, B, T, comm);
  if (post) {
    if (need_dinp) k::residual_forward(dres, dres, s.dln, NC);
  } else {
    k::layernorm_backward(need_dinp ? dres : nullptr, G(ln1_w_), G(ln1_b_), s.dln, x, P(ln1_w_),
                          a.ln1_mean, a.ln1_rstd, N, C);
  }
}

ComponentFlops TransformerBlock::flops(int B, int T, bool runs, bool trains) const {
  ComponentFlops f;
  attention_.add_flops(B, T, runs, trains, f);
  mlp_->add_flops(double(B) * T, runs, trains, f);
  return f;
}

}  // namespace frugal
