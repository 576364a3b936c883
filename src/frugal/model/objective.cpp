// The causal language-model head and the masked-LM head; see objective.h.
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
    : config_(config), split_(table.shard().size > 1), shard_(table.shard()), first_(0), columns_(config.vocab_size) {
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
  const double C = config_.n_embd, n = shard_.local_rows(N);  // n: this rank's rows
  acts = {};
  acts[Norm] = take(n * C);
  acts[Mean] = take(n);
  acts[Rstd] = take(n);
  acts[Losses] = take(N);  // every row's
  acts[DNorm] = take(n * C);
}

LossTerms CausalLmHead::forward(const float* params, float* grads, const ObjectiveActs& acts,
                                const float* x, const int32_t* targets, int N, float grad_scale,
                                TensorCollectives& comm) const {
  const int C = config_.n_embd, V = config_.vocab_size, n = static_cast<int>(shard_.local_rows(N));
  const float* bias = norm_b_ == kAbsent ? nullptr : params + norm_b_;
  k::layernorm_forward(acts[Norm], acts[Mean], acts[Rstd], x, params + norm_w_, bias, n, C,
                       config_.layernorm_eps);
  int valid = 0;
  for (int i = 0; i < N; ++i) valid += targets[i] >= 0;
  const float dloss = valid > 0 ? grad_scale / static_cast<float>(valid) : 0.0f;
  const bool training = grad_scale != 0.0f;
  // The head's input and its gradient, over every row: under sequence parallelism the ranks' rows
  // joined, and the gradient in the joined room until the sum leaves this rank's rows in DNorm.
  const bool rows_split = shard_.split_rows();
  const float* normed = acts[Norm];
  if (rows_split) {
    comm.gather_rows(acts[Norm], size_t(n) * C, acts[kJoinedRows]);
    normed = acts[kJoinedRows];
  }
  float* dnorm = training ? acts[rows_split ? kJoinedGrads : DNorm] : nullptr;
  float* dhead = grads ? grads + head_ : nullptr;
  const bool bf16 = copy_.bf16();
  const float cap = config_.logit_softcap;
  if (!split_) {
    if (bf16)
      k::lm_head_cross_entropy_bf16(acts[Losses], dnorm, dhead, normed, copy_.data(), targets, N, C, V,
                                    dloss, cap);
    else
      k::lm_head_cross_entropy(acts[Losses], dnorm, dhead, normed, params + head_, targets, N, C, V, dloss, cap);
  } else {
    const k::VocabSplit split{first_, V, [&comm](float* p, size_t n) { comm.all_reduce_max(p, n); },
                              [&comm](float* p, size_t n) { comm.all_reduce_sum(p, n); }};
    if (bf16)
      k::lm_head_cross_entropy_split_bf16(acts[Losses], dnorm, dhead, normed, copy_.data(), targets, N,
                                          C, columns_, dloss, split, cap);
    else
      k::lm_head_cross_entropy_split(acts[Losses], dnorm, dhead, normed, params + head_, targets, N, C,
                                     columns_, dloss, split, cap);
    if (dnorm) comm.sum_rows(dnorm, N, C, acts[DNorm]);  // the ranks' columns' parts
  }
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += acts[Losses][i];
  return {valid > 0 ? static_cast<float>(sum / valid) : 0.0f, {}};
}

void CausalLmHead::backward(const float* params, float* grads, const ObjectiveActs& acts,
                            const float* x, float* dres, int N, bool weights, TensorCollectives& comm) const {
  const int C = config_.n_embd, n = static_cast<int>(shard_.local_rows(N));
  const bool rows_split = shard_.split_rows(), bias = norm_b_ != kAbsent;
  // ln_f's weight gradients; under sequence parallelism this rank's rows' in the joined room
  // ([weight | bias]; the forward is done with it), then summed over the group
  float* dw = !weights ? nullptr : rows_split ? acts[kJoinedRows] : grads + norm_w_;
  float* db = !weights || !bias ? nullptr : rows_split ? acts[kJoinedRows] + C : grads + norm_b_;
  if (rows_split && weights) std::fill_n(dw, 2 * C, 0.0f);
  k::layernorm_backward(dres, dw, db, acts[DNorm], x, params + norm_w_, acts[Mean], acts[Rstd], n, C);
  if (!rows_split || !weights) return;
  comm.all_reduce_sum(dw, 2 * size_t(C));
  k::residual_forward(grads + norm_w_, grads + norm_w_, dw, C);
  if (bias) k::residual_forward(grads + norm_b_, grads + norm_b_, db, C);
}

void CausalLmHead::head_logits(const float* params, const float* x, float* out, int N) const {
  FRUGAL_CHECK(!split_, "internal: the logits of a vocabulary-split head are asked for; gather the model first");
  const int C = config_.n_embd, V = config_.vocab_size;
  if (!copy_.bf16()) {
    k::lm_head_logits(out, x, params + head_, N, C, V);
  } else {
    std::vector<kernels::bf16> rounded(size_t(N) * C);
    k::f32_to_bf16(rounded.data(), x, rounded.size());
    k::matmul_bf16_forward(out, rounded.data(), copy_.data(), nullptr, N, C, V);
  }
  if (config_.logit_softcap > 0) k::lm_head_softcap(out, size_t(N) * V, config_.logit_softcap);
}

void CausalLmHead::logits(const float* params, const ObjectiveActs& acts, const float*, float* out, int N) const {
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

void HeadWorkingCopy::set_dtype(kernels::DType dtype, size_t offset, const WeightRounding& rounding) {
  dtype_ = dtype;
  if (!bf16()) copy_ = {};
  rounding_ = offset == ParamTable::kAbsent ? kernels::Bf16Rounding{} : rounding(offset);
}

void HeadWorkingCopy::refresh(const float* weight, int rows, int C) {
  if (!bf16()) return;
  FRUGAL_PROFILE("bf16 weight rounding");
  copy_.resize(size_t(rows) * C);
  k::round_to_bf16(copy_.data(), weight, copy_.size(), rounding_);
}

void CausalLmHead::refresh(const float* params) {
  if (head_ != kAbsent) copy_.refresh(params + head_, columns_, config_.n_embd);
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

// ---- MaskedLmHead ----

void MaskedLmHead::declare(ModelSpec& spec) {
  const ModelConfig& c = spec.config();
  const int L = c.n_layer;
  if (c.norm == NormPlacement::Pre) declare_norm(spec, "transformer.ln_f", L);
  spec.add({.name = "lm_head.dense.weight", .shape = {c.n_embd, c.n_embd}, .role = ParamRole::Weight, .layer = L,
            .features = {Features::Residual, Features::Residual}});
  if (c.bias)
    spec.add({.name = "lm_head.dense.bias", .shape = {c.n_embd}, .role = ParamRole::Bias, .layer = L,
              .init = Init::Zeros, .features = {Features::Residual, Features::None}});
  declare_norm(spec, "lm_head.layer_norm", L);
  if (c.bias)
    spec.add({.name = "lm_head.bias", .shape = {c.padded_vocab()}, .role = ParamRole::Bias, .layer = L,
              .init = Init::Zeros, .used_rows = c.vocab_size});
}

MaskedLmHead::MaskedLmHead(const ModelConfig& config, const ParamTable& table) : config_(config) {
  FRUGAL_CHECK(table.shard().size == 1, "model.objective = \"mlm\" does not split over a tensor-parallel "
               "group; set parallel.tensor = 1");
  ln_f_w_ = table.offset_of("transformer.ln_f.weight");
  ln_f_b_ = table.offset_of("transformer.ln_f.bias");
  dense_w_ = table.offset_of("lm_head.dense.weight");
  dense_b_ = table.offset_of("lm_head.dense.bias");
  norm_w_ = table.offset_of("lm_head.layer_norm.weight");
  norm_b_ = table.offset_of("lm_head.layer_norm.bias");
  bias_ = table.offset_of("lm_head.bias");
  head_ = table.offset_of("transformer.wte.weight");
}

void MaskedLmHead::lay_out(double N, const Take& take, ObjectiveActs& acts) const {
  const double C = config_.n_embd;
  acts = {};
  if (config_.norm == NormPlacement::Pre) {
    acts[Norm] = take(N * C);
    acts[Mean] = take(N);
    acts[Rstd] = take(N);
  }
  acts[Rows] = take(N);
  acts[Count] = take(1);
  for (Place p : {Gathered, Dense, Gelu, Out, DOut, DGelu}) acts[p] = take(N * C);
  for (Place p : {OutMean, OutRstd, Losses}) acts[p] = take(N);
  acts[DBias] = take(config_.padded_vocab());
}

const float* MaskedLmHead::normed(const float* params, const float* x, int N, float* xn, float* mean,
                                  float* rstd) const {
  if (config_.norm != NormPlacement::Pre) return x;
  const float* b = ln_f_b_ == kAbsent ? nullptr : params + ln_f_b_;
  k::layernorm_forward(xn, mean, rstd, x, params + ln_f_w_, b, N, config_.n_embd, config_.layernorm_eps);
  return xn;
}

void MaskedLmHead::transform(const float* params, const float* g, int M, float* h, float* a, float* u,
                             float* mean, float* rstd) const {
  const int C = config_.n_embd;
  const auto optional = [params](size_t at) { return at == kAbsent ? nullptr : params + at; };
  k::matmul_forward(h, g, params + dense_w_, optional(dense_b_), M, C, C);
  k::gelu_forward(a, h, size_t(M) * C);
  k::layernorm_forward(u, mean, rstd, a, params + norm_w_, optional(norm_b_), M, C, config_.layernorm_eps);
}

void MaskedLmHead::decode(const float* params, const float* u, float* out, int M) const {
  const int C = config_.n_embd, V = config_.vocab_size;
  const float* bias = bias_ == kAbsent ? nullptr : params + bias_;
  if (!copy_.bf16()) {
    k::lm_head_logits(out, u, params + head_, M, C, V, bias);
  } else {
    std::vector<kernels::bf16> rounded(size_t(M) * C);
    k::f32_to_bf16(rounded.data(), u, rounded.size());
    k::matmul_bf16_forward(out, rounded.data(), copy_.data(), bias, M, C, V);
  }
  if (config_.logit_softcap > 0) k::lm_head_softcap(out, size_t(M) * V, config_.logit_softcap);
}

LossTerms MaskedLmHead::forward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                                const int32_t* targets, int N, float grad_scale, TensorCollectives&) const {
  const int C = config_.n_embd, V = config_.vocab_size;
  FRUGAL_CHECK(N < (1 << 24), "internal: {} rows in one micro-batch; the masked-LM head indexes fewer than 2^24", N);
  // The rows with a target, gathered: the head runs on them only.
  const float* xn = normed(params, x, N, acts[Norm], acts[Mean], acts[Rstd]);
  std::vector<int32_t> selected;
  int M = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    acts[Rows][M] = static_cast<float>(i);
    std::copy_n(xn + size_t(i) * C, C, acts[Gathered] + size_t(M) * C);
    selected.push_back(targets[i]);
    ++M;
  }
  acts[Count][0] = static_cast<float>(M);
  if (M == 0) return {};
  transform(params, acts[Gathered], M, acts[Dense], acts[Gelu], acts[Out], acts[OutMean], acts[OutRstd]);
  const bool training = grad_scale != 0.0f;
  const float dloss = grad_scale / static_cast<float>(M);
  float* dout = training ? acts[DOut] : nullptr;
  float* dhead = grads ? grads + head_ : nullptr;
  // The bias gradient is kept until backward: it trains even when the tied decoder (the frozen
  // token embedding) does not, and forward is given no gradients then.
  float* dbias = training && bias_ != kAbsent ? acts[DBias] : nullptr;
  if (dbias) std::fill_n(dbias, V, 0.0f);
  const k::LmHeadBias bias{bias_ == kAbsent ? nullptr : params + bias_, dbias};
  if (copy_.bf16())
    k::lm_head_cross_entropy_bf16(acts[Losses], dout, dhead, acts[Out], copy_.data(), selected.data(), M, C, V,
                                  dloss, config_.logit_softcap, bias);
  else
    k::lm_head_cross_entropy(acts[Losses], dout, dhead, acts[Out], params + head_, selected.data(), M, C, V, dloss,
                             config_.logit_softcap, bias);
  double sum = 0.0;
  for (int i = 0; i < M; ++i) sum += acts[Losses][i];
  return {static_cast<float>(sum / M), {}};
}

void MaskedLmHead::backward(const float* params, float* grads, const ObjectiveActs& acts, const float* x,
                            float* dres, int N, bool weights, TensorCollectives&) const {
  const int C = config_.n_embd, M = static_cast<int>(acts[Count][0]);
  if (M == 0) return;
  const auto grad = [&](size_t at) { return weights && at != kAbsent ? grads + at : nullptr; };
  if (weights && bias_ != kAbsent)
    for (int v = 0; v < config_.vocab_size; ++v) grads[bias_ + v] += acts[DBias][v];
  // u = LayerNorm(a): d loss / d a into DGelu (layernorm_backward adds); then through the GELU
  // into DOut (consumed), then through the dense into DGelu (consumed).
  const size_t MC = size_t(M) * C;
  std::fill_n(acts[DGelu], MC, 0.0f);
  k::layernorm_backward(acts[DGelu], grad(norm_w_), grad(norm_b_), acts[DOut], acts[Gelu], params + norm_w_,
                        acts[OutMean], acts[OutRstd], M, C);
  k::gelu_backward(acts[DOut], acts[DGelu], acts[Dense], MC);
  // d loss / d xn is needed for dres, and for ln_f's weight gradients in a pre-LN encoder.
  const bool pre = config_.norm == NormPlacement::Pre, want_dxn = dres || (pre && weights);
  k::matmul_backward(want_dxn ? acts[DGelu] : nullptr, grad(dense_w_), grad(dense_b_), acts[DOut], acts[Gathered],
                     params + dense_w_, M, C, C, false);
  if (!want_dxn) return;
  // d loss / d xn: the gathered rows' gradients scattered back, zero elsewhere. A post-LN encoder's
  // xn is x: they add into dres. A pre-LN one's go through ln_f (Norm holds them; its output is no
  // longer needed).
  float* dxn = pre ? acts[Norm] : dres;
  if (pre) std::fill_n(dxn, size_t(N) * C, 0.0f);
  for (int r = 0; r < M; ++r) {
    float* d = dxn + size_t(acts[Rows][r]) * C;
    k::residual_forward(d, d, acts[DGelu] + size_t(r) * C, C);
  }
  if (pre)
    k::layernorm_backward(dres, grad(ln_f_w_), grad(ln_f_b_), dxn, x, params + ln_f_w_, acts[Mean], acts[Rstd], N,
                          C);
}

void MaskedLmHead::logits(const float* params, const ObjectiveActs&, const float* x, float* out, int N) const {
  const size_t NC = size_t(N) * config_.n_embd;
  std::vector<float> xn(NC), h(NC), a(NC), u(NC), stats(2 * size_t(N));
  const float* rows = normed(params, x, N, xn.data(), stats.data(), stats.data() + N);
  transform(params, rows, N, h.data(), a.data(), u.data(), stats.data(), stats.data() + N);
  decode(params, u.data(), out, N);
}

void MaskedLmHead::row_logits(const float* params, const float* x, float* out, float*) const {
  logits(params, {}, x, out, 1);
}

void MaskedLmHead::refresh(const float* params) { copy_.refresh(params + head_, config_.vocab_size, config_.n_embd); }

ComponentFlops MaskedLmHead::flops(double N, bool head_trains) const {
  // The head runs on the rows with a target only: the masked share of the N rows (the expected
  // count; specials, never masked, make the true one a little smaller).
  const double rows = N * kMlmPredictedShare;
  const double C = config_.n_embd, head = 2 * rows * C * double(config_.vocab_size), dense = 2 * rows * C * C;
  ComponentFlops f;
  f.dense.forward = f.dense.backward_input = f.dense.backward_weight = head + dense;
  f.executed.forward = f.executed.backward_input = head + dense;
  f.executed.backward_weight = dense + (head_trains ? head : 0);
  return f;
}

std::string head_input_norm(const ModelConfig& config) {
  return config.encoder() ? "lm_head.layer_norm" : "transformer.ln_f";
}

void declare_objective(ModelSpec& spec) {
  if (spec.config().objective == ObjectiveKind::Mlm)
    MaskedLmHead::declare(spec);
  else
    CausalLmHead::declare(spec);
}

std::unique_ptr<Objective> make_objective(const ModelConfig& config, const ParamTable& table) {
  if (config.objective == ObjectiveKind::Mlm) return std::make_unique<MaskedLmHead>(config, table);
  return std::make_unique<CausalLmHead>(config, table);
}

}  // namespace frugal
