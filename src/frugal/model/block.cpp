// The transformer block: its norms, residual sums and dropout around the branches; see block.h.
#include "frugal/model/block.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
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
      shard_(shard),
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
  const double C = config_.n_embd, n = shard_.local_rows(N);  // n: the rows between the branches
  const bool bf16 = dtype == kernels::DType::BF16, post = config_.norm == NormPlacement::Post;
  // ln1 feeds the qkv projection (pre-LN) or is h, the MLP's input and residual (post-LN); ln2 feeds
  // the MLP (pre-LN) or is the sum before ln_2 (post-LN)
  const bool ln1_16 = bf16 && (!post || mlp_->bf16_input()), ln2_16 = bf16 && !post && mlp_->bf16_input();
  a.ln1 = ln1_16 && !post ? nullptr : take(n * C);
  a.ln1_16 = ln1_16 ? take_bf16(take, n * C) : nullptr;
  a.ln1_mean = take(n);
  a.ln1_rstd = take(n);
  attention_.lay_out(N, take, a.attn, dtype);
  a.res_mid = take(n * C);
  a.ln2 = ln2_16 ? nullptr : take(n * C);
  a.ln2_16 = ln2_16 ? take_bf16(take, n * C) : nullptr;
  a.ln2_mean = take(n);
  a.ln2_rstd = take(n);
  mlp_->lay_out(N, take, a.mlp, dtype);
}

void TransformerBlock::lay_out_scratch(double N, const Take& take, BlockScratch& scratch, kernels::DType dtype) const {
  const double C = config_.n_embd;
  scratch.dln = take(N * C);
  attention_.lay_out_scratch(N, take, scratch.attn);
  mlp_->lay_out_scratch(N, take, scratch.mlp);
  scratch.branch = take(N * C);
  scratch.dsum = config_.norm == NormPlacement::Post ? take(N * C) : nullptr;
  scratch.joined = nullptr, scratch.joined16 = nullptr, scratch.dnorms = nullptr;
  if (!shard_.split_rows()) return;
  // the branches' inputs are joined as the block keeps them (lay_out_internals): the bf16 ones when
  // the activations are, fp32 ones else, for an MLP that takes fp32, and post-LN (x, h)
  const bool bf16 = dtype == kernels::DType::BF16;
  if (!bf16 || !mlp_->bf16_input() || config_.norm == NormPlacement::Post) scratch.joined = take(N * C);
  if (bf16) scratch.joined16 = take_bf16(take, N * C);
  scratch.dnorms = take(4 * C);
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

LinearInput TransformerBlock::joined(const float* in, const k::bf16* in16, const BlockScratch& s, int N,
                                    TensorCollectives& comm) const {
  if (!shard_.split_rows()) return {in, in16};
  const size_t local = size_t(N) / shard_.size * config_.n_embd;  // this rank's values
  if (in) comm.gather_rows(in, local, s.joined);
  // bf16 values in pairs, as floats (n_embd is even: checked with the configuration)
  if (in16) comm.all_gather(reinterpret_cast<const float*>(in16), local / 2, reinterpret_cast<float*>(s.joined16));
  return {in ? s.joined : nullptr, in16 ? s.joined16 : nullptr};
}

FeedForward::Report TransformerBlock::forward(const float* params, const BlockActs& a, const float* x,
                                              const BlockScratch& s, int B, int T, const Dropout& dropout,
                                              TensorCollectives& comm, const KvCache* cache) const {
  const int C = config_.n_embd, N = B * T, n = static_cast<int>(shard_.local_rows(N));  // n: this rank's rows
  const size_t nC = size_t(n) * C;
  const float eps = config_.layernorm_eps;
  const bool post = config_.norm == NormPlacement::Post;
  float* branch = s.branch;  // (N, C): the branch's output; the sum leaves this rank's rows first
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  // out (fp32) and/or out16 (bf16) = a LayerNorm of this rank's rows of in, keeping its mean and rstd
  const auto layernorm = [&](float* out, k::bf16* out16, float* mean, float* rstd, const float* in, size_t w,
                             size_t b) {
    if (out16)
      k::layernorm_forward_bf16(out16, out, mean, rstd, in, P(w), P(b), n, C, eps);
    else
      k::layernorm_forward(out, mean, rstd, in, P(w), P(b), n, C, eps);
  };
  // attention branch, on ln_1(x) (pre-LN) or on x (post-LN)
  if (!post) layernorm(a.ln1, a.ln1_16, a.ln1_mean, a.ln1_rstd, x, ln1_w_, ln1_b_);
  attention_.forward(params, a.attn, post ? joined(x, nullptr, s, N, comm) : joined(a.ln1, a.ln1_16, s, N, comm),
                     branch, B, T, lead_, comm, cache);
  k::dropout_apply(branch, nC, dropout.p, site_key(dropout.step_key, layer_, 0), dropout.first);
  k::residual_forward(a.res_mid, x, branch, nC);
  // MLP branch, on h: ln_2(res_mid) (pre-LN; h = res_mid) or h = ln_1(res_mid) (post-LN)
  const float* h = a.res_mid;
  if (post) {
    layernorm(a.ln1, a.ln1_16, a.ln1_mean, a.ln1_rstd, a.res_mid, ln1_w_, ln1_b_);
    h = a.ln1;
  } else {
    layernorm(a.ln2, a.ln2_16, a.ln2_mean, a.ln2_rstd, a.res_mid, ln2_w_, ln2_b_);
  }
  const LinearInput mlp_in = post ? joined(a.ln1, a.ln1_16, s, N, comm) : joined(a.ln2, a.ln2_16, s, N, comm);
  FeedForward::Report report = mlp_->forward(params, a.mlp, mlp_in, branch, N, lead_, comm);
  k::dropout_apply(branch, nC, dropout.p, site_key(dropout.step_key, layer_, 1), dropout.first);
  if (post) {
    k::residual_forward(a.ln2, h, branch, nC);
    k::layernorm_forward(a.res_out, a.ln2_mean, a.ln2_rstd, a.ln2, P(ln2_w_), P(ln2_b_), n, C, eps);
  } else {
    k::residual_forward(a.res_out, h, branch, nC);
  }
  return report;
}

void TransformerBlock::backward(const float* params, float* grads, const BlockActs& a, const float* x,
                                float* dres, const BlockScratch& s, int B, int T,
                                const Dropout& dropout, bool need_dinp, float aux_scale,
                                TensorCollectives& comm) const {
  const int C = config_.n_embd, N = B * T, n = static_cast<int>(shard_.local_rows(N));  // n: this rank's rows
  const size_t nC = size_t(n) * C;
  const bool post = config_.norm == NormPlacement::Post, split = shard_.split_rows();
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  // The LayerNorms' weight gradients: under sequence parallelism this rank's rows' parts first,
  // in dnorms [ln_1 weight | ln_1 bias | ln_2 weight | ln_2 bias], summed over the group at the end.
  const std::array<size_t, 4> norms{ln1_w_, ln1_b_, ln2_w_, ln2_b_};
  if (split) std::memset(s.dnorms, 0, sizeof(float) * 4 * C);
  const auto G = [&](size_t off) -> float* {
    if (off == kAbsent) return nullptr;
    if (split) return s.dnorms + size_t(std::ranges::find(norms, off) - norms.begin()) * C;
    return grads + off;
  };
  // d(branch), the row-parallel linear's output gradient: the dropout mask applied to the gradient
  // reaching the residual sum (this rank's rows), under sequence parallelism joined from every rank
  const auto branch_grad = [&](const float* dsum, int site) -> const float* {
    const float* d = dsum;
    if (dropout.p > 0.0f) {
      float* masked = split ? s.dln : s.branch;  // dln is free until the branch's backward
      std::memcpy(masked, dsum, sizeof(float) * nC);
      k::dropout_apply(masked, nC, dropout.p, site_key(dropout.step_key, layer_, site), dropout.first);
      d = masked;
    }
    if (!split) return d;
    comm.gather_rows(d, nC, s.branch);
    return s.branch;
  };
  // Post-LN: d loss / d (h + MLP branch), through ln_2, is what the MLP branch and h receive.
  const float* dout = dres;
  if (post) {
    std::memset(s.dsum, 0, sizeof(float) * nC);
    k::layernorm_backward(s.dsum, G(ln2_w_), G(ln2_b_), dres, a.ln2, P(ln2_w_), a.ln2_mean, a.ln2_rstd, n, C);
    dout = s.dsum;
  }
  // MLP branch: d loss / d its input into dln (this rank's rows under sequence parallelism)
  const float* dmlp = branch_grad(dout, 1);
  mlp_->backward(params, grads, a.mlp, post ? joined(a.ln1, a.ln1_16, s, N, comm) : joined(a.ln2, a.ln2_16, s, N, comm),
                 dmlp, s.dln, s.mlp, N, aux_scale, comm);
  if (post) {
    // d h = the branch's + the residual's; through ln_1 to d (x + attention branch), in dres
    k::residual_forward(s.dln, s.dln, s.dsum, nC);
    std::memset(dres, 0, sizeof(float) * nC);
    k::layernorm_backward(dres, G(ln1_w_), G(ln1_b_), s.dln, a.res_mid, P(ln1_w_), a.ln1_mean,
                          a.ln1_rstd, n, C);
  } else {
    k::layernorm_backward(dres, G(ln2_w_), G(ln2_b_), s.dln, a.res_mid, P(ln2_w_), a.ln2_mean,
                          a.ln2_rstd, n, C);
  }
  // attention branch: d loss / d its input into dln
  const float* dattn = branch_grad(dres, 0);
  attention_.backward(params, grads, a.attn, post ? joined(x, nullptr, s, N, comm) : joined(a.ln1, a.ln1_16, s, N, comm),
                      dattn, s.dln, s.attn, B, T, comm);
  if (post) {
    if (need_dinp) k::residual_forward(dres, dres, s.dln, nC);
  } else {
    k::layernorm_backward(need_dinp ? dres : nullptr, G(ln1_w_), G(ln1_b_), s.dln, x, P(ln1_w_),
                          a.ln1_mean, a.ln1_rstd, n, C);
  }
  if (!split) return;
  // the whole micro-batch's LayerNorm weight gradients, the same bits on every rank
  comm.all_reduce_sum(s.dnorms, 4 * size_t(C));
  for (int i = 0; i < 4; ++i)
    if (norms[i] != kAbsent) k::residual_forward(grads + norms[i], grads + norms[i], s.dnorms + size_t(i) * C, C);
}

ComponentFlops TransformerBlock::flops(int B, int T, bool runs, bool trains) const {
  ComponentFlops f;
  attention_.add_flops(B, T, runs, trains, f);
  mlp_->add_flops(double(B) * T, runs, trains, f);
  return f;
}

}  // namespace frugal
