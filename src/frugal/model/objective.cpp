// The causal language-model head; see objective.h.
#include "frugal/model/objective.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

void CausalLmHead::declare(ModelSpec& spec) {
  const ModelConfig& c = spec.config();
  declare_norm(spec, "transformer.ln_f", c.n_layer);
  if (!c.tied_head)
    spec.add({.name = "lm_head.weight", .shape = {c.padded_vocab(), c.n_embd},
              .placement = Placement::sharded(0), .role = ParamRole::Weight, .layer = c.n_layer,
              .used_rows = c.vocab_size, .features = {Features::None, Features::Residual},
              .untied_head = true});
}

CausalLmHead::CausalLmHead(const ModelConfig& config, const ParamTable& table)
    : config_(config), split_(table.shard().size > 1), first_(0), columns_(config.vocab_size) {
  norm_w_ = table.offset_of("transformer.ln_f.weight");
  norm_b_ = table.offset_of("transformer.ln_f.bias");
  const char* head = config.tied_head ? "transformer.wte.weight" : "lm_head.weight";
  head_ = table.offset_of(head);
  if (split_ && head_ != kAbsent) {
    const int rows = static_cast<int>(table.at(head).local[0]);
    first_ = table.shard().rank * rows;
    columns_ = std::clamp(config.vocab_size - first_, 0, rows);
  }
}

void CausalLmHead::lay_out(double N, const Take& take, ObjectiveActs& acts) const {
  const double C = config_.n_embd;
  acts = {};
  acts[Norm] = take(N * C);
  acts[Mean] = take(N);
  acts[Rstd] = take(N);
  acts[Losses] = take(N);
  acts[DNorm] = take(N * C);
}

LossTerms CausalLmHead::forward(const float* params, float* grads, const ObjectiveActs& acts,
                                const float* x, const int32_t* targets, int N, float grad_scale,
                                TensorCollectives& comm) const {
  const int C = config_.n_embd, V = config_.vocab_size;
  const float* bias = norm_b_ == kAbsent ? nullptr : params + norm_b_;
  k::layernorm_forward(acts[Norm], acts[Mean], acts[Rstd], x, params + norm_w_, bias, N, C,
                       config_.layernorm_eps);
  int valid = 0;
  for (int i = 0; i < N; ++i) valid += targets[i] >= 0;
  const float dloss = valid > 0 ? grad_scale / static_cast<float>(valid) : 0.0f;
  const bool training = grad_scale != 0.0f;
  float* dnorm = training ? acts[DNorm] : nullptr;
  float* dhead = grads ? grads + head_ : nullptr;
  const bool bf16 = dtype_ == kernels::DType::BF16;
  const float cap = config_.logit_softcap;
  if (!split_) {
    if (bf16)
      k::lm_head_cross_entropy_bf16(acts[Losses], dnorm, dhead, acts[Norm], head_bf16_.data(), targets, N, C, V,
                                    dloss, cap);
    else
      k::lm_head_cross_entropy(acts[Losses], dnorm, dhead, acts[Norm], params + head_, targets, N, C, V, dloss, cap);
  } else {
    const k::VocabSplit split{first_, V, [&comm](float* p, size_t n) { comm.all_reduce_max(p, n); },
                              [&comm](float* p, size_t n) { comm.all_reduce_sum(p, n); }};
    if (bf16)
      k::lm_head_cross_entropy_split_bf16(acts[Losses], dnorm, dhead, acts[Norm], head_bf16_.data(), targets, N,
                                          C, columns_, dloss, split, cap);
    else
      k::lm_head_cross_entropy_split(acts[Losses], dnorm, dhead, acts[Norm], params + head_, targets, N, C,
                                     columns_, dloss, split, cap);
    if (dnorm) comm.all_reduce_sum(dnorm, size_t(N) * C);  // the ranks' columns' parts
  }
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += acts[Losses][i];
  return {valid > 0 ? static_cast<float>(sum / valid) : 0.0f, {}};
}

void CausalLmHead::backward(const float* params, float* grads, const ObjectiveActs& acts,
                            const float* x, float* dres, int N, bool weights) const {
  const int C = config_.n_embd;
  float* dw = weights ? grads + norm_w_ : nullptr;
  float* db = weights && norm_b_ != kAbsent ? grads + norm_b_ : nullptr;
  k::layernorm_backward(dres, dw, db, acts[DNorm], x, params + norm_w_, acts[Mean], acts[Rstd], N, C);
}

void CausalLmHead::head_logits(const float* params, const float* x, float* out, int N) const {
  FRUGAL_CHECK(!split_, "internal: the logits of a vocabulary-split head are asked for; gather the model first");
  const int C = config_.n_embd, V = config_.vocab_size;
  if (dtype_ != kernels::DType::BF16) {
    k::lm_head_logits(out, x, params + head_, N, C, V);
  } else {
    std::vector<kernels::bf16> rounded(size_t(N) * C);
    k::f32_to_bf16(rounded.data(), x, rounded.size());
    k::matmul_bf16_forward(out, rounded.data(), head_bf16_.data(), nullptr, N, C, V);
  }
  if (config_.logit_softcap > 0) k::lm_head_softcap(out, size_t(N) * V, config_.logit_softcap);
}

void CausalLmHead::logits(const float* params, const ObjectiveActs& acts, float* out, int N) const {
  head_logits(params, acts[Norm], out, N);
}

void CausalLmHead::row_logits(const float* params, const float* x, float* out, float* scratch) const {
  FRUGAL_CHECK(!split_, "internal: the logits of a vocabulary-split head are asked for; gather the model first");
  const int C = config_.n_embd;
  const float* bias = norm_b_ == kAbsent ? nullptr : params + norm_b_;
  k::layernorm_forward(scratch, scratch + C, scratch + C + 1, x, params + norm_w_, bias, 1, C,
                       config_.layernorm_eps);
  head_logits(params, scratch, out, 1);
}

void CausalLmHead::set_dtype(kernels::DType dtype) {
  dtype_ = dtype;
  if (dtype != kernels::DType::BF16) head_bf16_ = {};
}

void CausalLmHead::refresh(const float* params) {
  if (dtype_ != kernels::DType::BF16 || head_ == kAbsent) return;
  FRUGAL_PROFILE("bf16 weight rounding");
  head_bf16_.resize(size_t(columns_) * config_.n_embd);
  k::f32_to_bf16(head_bf16_.data(), params + head_, head_bf16_.size());
}

ComponentFlops CausalLmHead::flops(double N, bool head_trains) const {
  // The LM head over this rank's real vocabulary columns, like a linear C -> V; its input gradient
  // runs whenever the step trains (the final LayerNorm, trainable even with every block frozen,
  // needs it).
  const double head = 2 * N * config_.n_embd * double(columns_);
  ComponentFlops f;
  f.dense.forward = f.dense.backward_input = f.dense.backward_weight = head;
  f.executed.forward = f.executed.backward_input = head;
  f.executed.backward_weight = head_trains ? head : 0;
  return f;
}

}  // namespace frugal
