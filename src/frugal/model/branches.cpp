// The attention and MLP branches; see branches.h.
#include "frugal/model/branches.h"

#include <cstring>
#include <initializer_list>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

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

// ---- LinearSlot ----

LinearSlot LinearSlot::find(const ParamTable& table, const std::string& prefix, int OC, int IC,
                            std::shared_ptr<LinearFormat> format) {
  return {table.offset_of(prefix + ".weight"), table.offset_of(prefix + ".bias"), OC, IC, std::move(format)};
}

namespace {
// Whether `format` takes inp's bf16 values: when it computes in bf16, or they are all there is.
bool takes_bf16(const LinearFormat& format, const LinearInput& inp) {
  return inp.b16 && (format.bf16_input() || !inp.f32);
}
}  // namespace

void LinearSlot::forward(const float* params, float* out, const LinearInput& inp, int N, bool with_bias) const {
  const float* b = with_bias && bias != kAbsent ? params + bias : nullptr;
  if (takes_bf16(*format, inp))
    format->forward_bf16_input(out, inp.b16, params + weight, b, N, IC, OC);
  else
    format->forward(out, inp.f32, params + weight, b, N, IC, OC);
}

namespace {
// The format's backward into dinp, dW and db, any of them null (not computed).
void format_backward(const LinearSlot& slot, const float* params, float* dinp, float* dw, float* db,
                     const float* dout, const LinearInput& inp, int N, bool accumulate_dinp) {
  LinearFormat& f = *slot.format;
  if (takes_bf16(f, inp))
    f.backward_bf16_input(dinp, dw, db, dout, inp.b16, params + slot.weight, N, slot.IC, slot.OC, accumulate_dinp);
  else
    f.backward(dinp, dw, db, dout, inp.f32, params + slot.weight, N, slot.IC, slot.OC, accumulate_dinp);
}
}  // namespace

void LinearSlot::backward(const float* params, float* grads, float* dinp, const float* dout,
                          const LinearInput& inp, int N, bool accumulate_dinp) const {
  float* db = bias != kAbsent ? grads + bias : nullptr;
  format_backward(*this, params, dinp, grads + weight, db, dout, inp, N, accumulate_dinp);
}

void LinearSlot::backward_input(const float* params, float* dinp, const float* dout, const LinearInput& inp,
                                int N, bool accumulate_dinp) const {
  format_backward(*this, params, dinp, nullptr, nullptr, dout, inp, N, accumulate_dinp);
}

void LinearSlot::backward_weight(const float* params, float* grads, const float* dout, const LinearInput& inp,
                                 int N) const {
  float* db = bias != kAbsent ? grads + bias : nullptr;
  format_backward(*this, params, nullptr, grads + weight, db, dout, inp, N, false);
}

namespace {
// The backward of column-parallel linears that all read `in` (the attention's qkv; the MLP's fc
// and gate), each with its output gradient: their input gradients added into din (N, C), then
// summed over the tensor group (TensorCollectives::sum_rows), and their weight gradients. When the
// group can exchange in the background the sum runs while the weight gradients are computed (they
// read neither din nor the group); otherwise each linear's backward runs whole, as in one process.
struct ColumnGrad {
  const LinearSlot* slot;
  const float* dout;
};
void column_parallel_backward(std::initializer_list<ColumnGrad> linears, const float* params, float* grads,
                              float* din, const LinearInput& in, int N, TensorCollectives& comm) {
  const size_t C = size_t(linears.begin()->slot->IC);
  if (!comm.overlaps()) {
    bool accumulate = false;
    for (const ColumnGrad& l : linears) {
      l.slot->backward(params, grads, din, l.dout, in, N, accumulate);
      accumulate = true;
    }
    comm.sum_rows(din, N, C, din);
    return;
  }
  bool accumulate = false;
  for (const ColumnGrad& l : linears) {
    l.slot->backward_input(params, din, l.dout, in, N, accumulate);
    accumulate = true;
  }
  comm.start_sum_rows(din, N, C, din);
  for (const ColumnGrad& l : linears) l.slot->backward_weight(params, grads, l.dout, in, N);
  comm.finish_sum_rows();
}
}  // namespace

void LinearSlot::add_flops(double N, bool runs, bool trains, ComponentFlops& f) const {
  if (!present()) return;
  const double dense = 2 * N * OC * IC;
  f.dense.forward += dense;
  f.dense.backward_input += dense;
  f.dense.backward_weight += dense;
  if (runs) f.executed.forward += dense * format->forward_density();
  if (trains) {
    f.executed.backward_input += dense * format->backward_input_density();
    f.executed.backward_weight += dense * format->weight_grad_density();
  }
}

// ---- Attention ----

namespace {
// The branches' linears, under a block's prefix (Hugging Face GPT-2 names).
constexpr const char* kQkv = "attn.c_attn";
constexpr const char* kAttnProj = "attn.c_proj";
constexpr const char* kFc = "c_fc";  // the MLP's, under its prefix
constexpr const char* kGate = "c_gate";
constexpr const char* kMlpProj = "c_proj";
}  // namespace

void Attention::declare(ModelSpec& spec, const std::string& prefix, int layer) {
  const int64_t C = spec.config().n_embd;
  using F = Features;
  declare_linear(spec, prefix + kQkv, layer, 3 * C, C, Parallel::Column, {F::Qkv, F::Residual},
                 Init::Normal, 3);
  declare_linear(spec, prefix + kAttnProj, layer, C, C, Parallel::Row, {F::Residual, F::Residual},
                 projection_init(spec.config()));
}

void Attention::lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const {
  a.qkv = take(3 * N * sizes_.attn_width);
  a.att = take(N * sizes_.attn_width);
  a.lse = take(sizes_.n_head * N);
  a.inv_rms = transform_.norm ? take(2 * sizes_.n_head * N) : nullptr;
  a.att16 = dtype == kernels::DType::BF16 ? take_bf16(take, N * sizes_.attn_width) : nullptr;
}

void Attention::lay_out_scratch(double N, const Take& take, Scratch& scratch) const {
  scratch.dqkv = take(3 * N * sizes_.attn_width);
  scratch.datt = take(N * sizes_.attn_width);
}

Attention::Acts Attention::rows(const Acts& all, size_t row0) const {
  const size_t W = sizes_.attn_width, NH = sizes_.n_head;
  return {all.qkv + row0 * 3 * W, all.att + row0 * W, all.lse + row0 * NH,
          all.inv_rms ? all.inv_rms + row0 * 2 * NH : nullptr, all.att16 ? all.att16 + row0 * W : nullptr};
}

Attention::Attention(const ModelConfig& config, const LocalSizes& sizes, const std::string& prefix,
                     const ParamTable& table, const std::shared_ptr<LinearFormat>& dense)
    : sizes_(sizes),
      transform_{.norm = config.qk_norm, .rotary = config.rotary(), .rope_base = config.rope_base},
      qkv_(LinearSlot::find(table, prefix + kQkv, 3 * sizes.attn_width, config.n_embd, dense)),
      proj_(LinearSlot::find(table, prefix + kAttnProj, config.n_embd, sizes.attn_width, dense)),
      full_(config.encoder() ? kernels::AttentionPattern::bidirectional() : kernels::AttentionPattern::causal()),
      pattern_(full_) {}

void Attention::forward(const float* params, const Acts& a, const LinearInput& in, float* out, int B, int T,
                        bool lead, TensorCollectives& comm, const KvCache* cache) const {
  const int W = sizes_.attn_width, NH = sizes_.n_head;
  qkv_.forward(params, a.qkv, in, B * T);
  k::qk_transform_forward(a.qkv, a.inv_rms, B, T, cache ? cache->pos0 : 0, W, NH, transform_);
  if (!cache) {
    if (a.att16)  // and the projection's bf16 input
      k::attention_forward_bf16(a.att, a.att16, a.lse, a.qkv, B, T, W, NH, pattern_);
    else
      k::attention_forward(a.att, a.lse, a.qkv, B, T, W, NH, pattern_);
  } else {
    FRUGAL_CHECK(B == 1 && (cache->pos0 == 0 || T == 1) && !a.att16,
                 "internal: decoding runs one window in fp32: a prefill from position 0 or one new row");
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
  // row-parallel: the partial products meet in the sum, which holds the bias once
  proj_.forward(params, out, {a.att, a.att16}, B * T, lead);
  comm.sum_rows(out, size_t(B) * T, proj_.OC, out);
}

void Attention::backward(const float* params, float* grads, const Acts& a, const LinearInput& in,
                         const float* dout, float* din, const Scratch& s, int B, int T,
                         TensorCollectives& comm) const {
  const int N = B * T;
  proj_.backward(params, grads, s.datt, dout, {a.att, a.att16}, N, false);
  // after the bf16 forward (a.att16), the backward on the bf16 values it rounded qkv to
  (a.att16 ? k::attention_backward_bf16 : k::attention_backward)(s.dqkv, s.datt, a.qkv, a.att, a.lse, B, T,
                                                                 sizes_.attn_width, sizes_.n_head, pattern_);
  k::qk_transform_backward(s.dqkv, a.qkv, a.inv_rms, B, T, sizes_.attn_width, sizes_.n_head, transform_);
  column_parallel_backward({{&qkv_, s.dqkv}}, params, grads, din, in, N, comm);
}

void Attention::add_flops(int B, int T, bool runs, bool trains, ComponentFlops& f) const {
  // q·kᵀ and p·v, 2·HS each, per allowed (query, key) pair; the dense model counts the model's
  // full pattern (causal, or an encoder's bidirectional)
  const double per_pair = 4.0 * B * sizes_.n_head * sizes_.head_size;
  const double full = per_pair * double(full_.pairs(T));
  const double attention = per_pair * double(pattern_.pairs(T));
  f.dense.forward += full;
  f.dense.backward_input += 2 * full;
  qkv_.add_flops(double(B) * T, runs, trains, f);
  proj_.add_flops(double(B) * T, runs, trains, f);
  if (runs) f.executed.forward += attention;
  if (trains) f.executed.backward_input += 2 * attention;
}

// ---- DenseMlp ----

void mlp_activation_forward(MlpKind kind, float* act, const float* gate, const float* fc, size_t n) {
  if (kind == MlpKind::Gelu)
    k::gelu_forward(act, fc, n);
  else if (kind == MlpKind::Relu2)
    k::relu2_forward(act, fc, n);
  else
    k::gated_forward(act, gate, fc, n, kind == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
}

void mlp_activation_forward(MlpKind kind, kernels::bf16* act16, const float* gate, const float* fc, size_t n) {
  if (kind == MlpKind::Gelu)
    k::gelu_forward_bf16(act16, fc, n);
  else if (kind == MlpKind::Relu2)
    k::relu2_forward_bf16(act16, fc, n);
  else
    k::gated_forward_bf16(act16, gate, fc, n, kind == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
}

void mlp_activation_backward(MlpKind kind, float* dgate, float* dfc, const float* dact, const float* gate,
                             const float* fc, size_t n) {
  if (kind == MlpKind::Gelu)
    k::gelu_backward(dfc, dact, fc, n);
  else if (kind == MlpKind::Relu2)
    k::relu2_backward(dfc, dact, fc, n);
  else
    k::gated_backward(dgate, dfc, dact, gate, fc, n, kind == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
}

void DenseMlp::declare(ModelSpec& spec, const std::string& prefix, int layer, int64_t hidden) {
  const int64_t C = spec.config().n_embd, H = hidden;
  using F = Features;
  declare_linear(spec, prefix + kFc, layer, H, C, Parallel::Column, {F::Hidden, F::Residual});
  if (spec.config().gated())
    declare_linear(spec, prefix + kGate, layer, H, C, Parallel::Column, {F::Hidden, F::Residual});
  declare_linear(spec, prefix + kMlpProj, layer, C, H, Parallel::Row, {F::Residual, F::Hidden},
                 projection_init(spec.config()));
}

DenseMlp::DenseMlp(const ModelConfig& config, const LocalSizes& sizes, const std::string& prefix,
                   const ParamTable& table, const std::shared_ptr<LinearFormat>& dense)
    : kind_(config.mlp),
      hidden_(sizes.ffn_hidden),
      fc_(LinearSlot::find(table, prefix + kFc, sizes.ffn_hidden, config.n_embd, dense)),
      gate_(LinearSlot::find(table, prefix + kGate, sizes.ffn_hidden, config.n_embd, dense)),
      proj_(LinearSlot::find(table, prefix + kMlpProj, config.n_embd, sizes.ffn_hidden, dense)) {}

void DenseMlp::lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const {
  a[Fc] = take(N * hidden_);
  a[Gate] = config_gated(kind_) ? take(N * hidden_) : nullptr;
  const bool bf16 = dtype == kernels::DType::BF16;
  a[Act] = bf16 ? nullptr : take(N * hidden_);
  a[Act16] = bf16 ? reinterpret_cast<float*>(take_bf16(take, N * hidden_)) : nullptr;
}

void DenseMlp::lay_out_scratch(double N, const Take& take, Scratch& s) const {
  lay_out(N, take, s, kernels::DType::F32);
}

FeedForward::Acts DenseMlp::rows(const Acts& all, size_t row0) const {
  const size_t off = row0 * hidden_;
  Acts a{};
  for (int p : {Fc, Gate, Act}) a[p] = all[p] ? all[p] + off : nullptr;
  a[Act16] = all[Act16] ? reinterpret_cast<float*>(act16(all) + off) : nullptr;
  return a;
}

LinearSlot& DenseMlp::linear(BlockLinear which) {
  return which == BlockLinear::Fc ? fc_ : which == BlockLinear::Gate ? gate_ : proj_;
}

const LinearSlot& DenseMlp::linear(BlockLinear which) const {
  return which == BlockLinear::Fc ? fc_ : which == BlockLinear::Gate ? gate_ : proj_;
}

FeedForward::Report DenseMlp::forward(const float* params, const Acts& a, const LinearInput& in, float* out,
                                      int N, bool lead, TensorCollectives& comm) const {
  fc_.forward(params, a[Fc], in, N);
  if (gate_.present()) gate_.forward(params, a[Gate], in, N);
  if (act16(a))
    mlp_activation_forward(kind_, act16(a), a[Gate], a[Fc], size_t(N) * hidden_);
  else
    mlp_activation_forward(kind_, a[Act], a[Gate], a[Fc], size_t(N) * hidden_);
  proj_.forward(params, out, {a[Act], act16(a)}, N, lead);  // row-parallel, as the attention's projection
  comm.sum_rows(out, N, proj_.OC, out);
  return {};
}

void DenseMlp::backward(const float* params, float* grads, const Acts& a, const LinearInput& in,
                        const float* dout, float* din, const Scratch& s, int N, float /*aux_scale*/,
                        TensorCollectives& comm) const {
  proj_.backward(params, grads, s[Act], dout, {a[Act], act16(a)}, N, false);
  mlp_activation_backward(kind_, s[Gate], s[Fc], s[Act], a[Gate], a[Fc], size_t(N) * hidden_);
  if (gate_.present())
    column_parallel_backward({{&fc_, s[Fc]}, {&gate_, s[Gate]}}, params, grads, din, in, N, comm);
  else
    column_parallel_backward({{&fc_, s[Fc]}}, params, grads, din, in, N, comm);
}

void DenseMlp::add_flops(double N, bool runs, bool trains, ComponentFlops& f) const {
  fc_.add_flops(N, runs, trains, f);
  gate_.add_flops(N, runs, trains, f);
  proj_.add_flops(N, runs, trains, f);
}

}  // namespace frugal
