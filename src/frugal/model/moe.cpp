// The mixture-of-experts MLP; see moe.h.
#include "frugal/model/moe.h"

#include <algorithm>
#include <cmath>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

namespace {

constexpr const char* kRouter = "router.weight";
constexpr const char* kBalanceBias = "router.balance_bias";
constexpr const char* kFc = "experts.c_fc";
constexpr const char* kGate = "experts.c_gate";
constexpr const char* kProj = "experts.c_proj";
constexpr const char* kShared = "shared_expert.";

// The scratch places: the gradients of the forward's places.
enum ScratchPlace { DLogits, DWeight, DYp, DFc, DGate, DAct, DXp, DShared };

int32_t* ints(float* place) { return reinterpret_cast<int32_t*>(place); }

// offsets (E + 1): where each expert's rows start among the N·k routed rows, from expert (N, k).
std::vector<int32_t> expert_offsets(const int32_t* expert, int R, int E) {
  std::vector<int32_t> offsets(E + 1, 0);
  for (int i = 0; i < R; ++i) ++offsets[expert[i] + 1];
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  return offsets;
}

// The forward and the three backward products of a dense product of `flops` multiply-adds × 2.
void add_product_flops(double flops, bool runs, bool trains, ComponentFlops& f) {
  f.dense.forward += flops;
  f.dense.backward_input += flops;
  f.dense.backward_weight += flops;
  if (runs) f.executed.forward += flops;
  if (trains) {
    f.executed.backward_input += flops;
    f.executed.backward_weight += flops;
  }
}

// Adds named values into `into`, by name (a new name is appended).
template <class Value>
void add_auxiliary(std::vector<std::pair<std::string, double>>& into,
                   const std::vector<std::pair<std::string, Value>>& values) {
  for (const auto& [name, value] : values) {
    auto it = std::find_if(into.begin(), into.end(), [&](const auto& a) { return a.first == name; });
    if (it == into.end()) it = into.insert(into.end(), {name, 0.0});
    it->second += double(value);
  }
}

// The places of the shared expert within a mixture's (from `first` on), and back.
FeedForward::Acts places_from(const FeedForward::Acts& all, int first) {
  FeedForward::Acts sub{};
  std::copy(all.begin() + first, all.end(), sub.begin());
  return sub;
}
void put_places(FeedForward::Acts& all, const FeedForward::Acts& sub, int first) {
  std::copy(sub.begin(), sub.end() - first, all.begin() + first);
}

size_t find(const ParamTable& table, const std::string& name) { return table.offset_of(name); }

}  // namespace

RoutingStats::RoutingStats(const ModelConfig& config, const BlockRange& range) : experts(config.moe.experts) {
  for (int l = range.begin; l < range.end; ++l)
    if (config.moe.on(l)) layers.push_back(l);
  load.assign(layers.size() * experts, 0.0);
}

void RoutingStats::add(int layer, const FeedForward::Report& report) {
  const size_t i = std::find(layers.begin(), layers.end(), layer) - layers.begin();
  FRUGAL_CHECK(i < layers.size() && report.load.size() == size_t(experts),
               "internal: block {} reports no expert load of {} experts", layer, experts);
  for (int e = 0; e < experts; ++e) load[i * experts + e] += double(report.load[e]);
  add_auxiliary(auxiliary, report.auxiliary);
}

void RoutingStats::add(const RoutingStats& other) {
  for (size_t j = 0; j < other.layers.size(); ++j) {
    const size_t i = std::find(layers.begin(), layers.end(), other.layers[j]) - layers.begin();
    FRUGAL_CHECK(i < layers.size() && other.experts == experts, "internal: routing statistics of block {} "
                 "added to those of other blocks", other.layers[j]);
    for (int e = 0; e < experts; ++e) load[i * experts + e] += other.load[j * experts + e];
  }
  add_auxiliary(auxiliary, other.auxiliary);
  forwards += other.forwards;
}

void RoutingStats::clear() {
  std::fill(load.begin(), load.end(), 0.0);
  for (auto& a : auxiliary) a.second = 0;
  forwards = 0;
}

std::vector<double> RoutingStats::values() const {
  std::vector<double> v(load);
  for (const auto& a : auxiliary) v.push_back(a.second);
  v.push_back(forwards);
  return v;
}

void RoutingStats::set_values(const std::vector<double>& v) {
  FRUGAL_CHECK(v.size() == load.size() + auxiliary.size() + 1, "internal: routing statistics of {} values, "
               "not {}", v.size(), load.size() + auxiliary.size() + 1);
  std::copy(v.begin(), v.begin() + load.size(), load.begin());
  for (size_t i = 0; i < auxiliary.size(); ++i) auxiliary[i].second = v[load.size() + i];
  forwards = v.back();
}

void MoeMlp::declare(ModelSpec& spec, const std::string& prefix, int layer) {
  const ModelConfig& c = spec.config();
  const int64_t E = c.moe.experts, C = c.n_embd, H = c.expert_hidden();
  spec.add({.name = prefix + kRouter, .shape = {E, C}, .role = ParamRole::Weight, .layer = layer});
  spec.add({.name = prefix + kBalanceBias, .shape = {E}, .role = ParamRole::Buffer, .layer = layer,
            .init = Init::Zeros});
  declare_expert_linear(spec, prefix + kFc, layer, E, H, C);
  if (c.gated()) declare_expert_linear(spec, prefix + kGate, layer, E, H, C);
  declare_expert_linear(spec, prefix + kProj, layer, E, C, H, projection_init(c));
  if (c.moe.shared_expert) DenseMlp::declare(spec, prefix + kShared, layer, H);
}

MoeMlp::MoeMlp(const ModelConfig& config, const LocalSizes& sizes, const std::string& prefix,
               const ParamTable& table, const std::shared_ptr<LinearFormat>& dense)
    : k_(config.moe.top_k),
      experts_(config.moe.experts),
      hidden_(config.expert_hidden()),
      C_(config.n_embd),
      kind_(config.mlp),
      moe_(config.moe),
      router_(find(table, prefix + kRouter)),
      bias_(find(table, prefix + kBalanceBias)),
      fc_w_(find(table, prefix + kFc + std::string(".weight"))),
      fc_b_(find(table, prefix + kFc + std::string(".bias"))),
      gate_w_(find(table, prefix + kGate + std::string(".weight"))),
      gate_b_(find(table, prefix + kGate + std::string(".bias"))),
      proj_w_(find(table, prefix + kProj + std::string(".weight"))),
      proj_b_(find(table, prefix + kProj + std::string(".bias"))) {
  FRUGAL_CHECK(table.shard().size == 1, "model.moe does not run under tensor parallelism yet; use "
               "parallel.tensor = 1 or model.moe.experts = 0");
  if (moe_.shared_expert) {
    LocalSizes shared = sizes;
    shared.ffn_hidden = hidden_;
    shared_ = std::make_unique<DenseMlp>(config, shared, prefix + kShared, table, dense);
  }
}

void MoeMlp::lay_out(double N, const Take& take, Acts& a) const {
  const double E = experts_, R = N * k_, H = hidden_;
  a[Logits] = take(N * E);
  a[Probs] = take(N * E);
  a[Lse] = take(N);
  a[Expert] = take(R);
  a[Weight] = take(R);
  a[Pos] = take(R);
  a[Src] = take(R);
  a[Xp] = take(R * C_);
  a[Fc] = take(R * H);
  a[Gate] = config_gated(kind_) ? take(R * H) : nullptr;
  a[Act] = take(R * H);
  a[Yp] = take(R * C_);
  if (shared_) {
    Acts shared{};
    shared_->lay_out(N, take, shared);
    put_places(a, shared, Shared);
  }
}

void MoeMlp::lay_out_scratch(double N, const Take& take, Scratch& s) const {
  const double R = N * k_, H = hidden_;
  s[DLogits] = take(N * experts_);
  s[DWeight] = take(R);
  s[DYp] = take(R * C_);
  s[DFc] = take(R * H);
  s[DGate] = config_gated(kind_) ? take(R * H) : nullptr;
  s[DAct] = take(R * H);
  s[DXp] = take(R * C_);
  if (shared_) {
    Scratch shared{};
    shared_->lay_out_scratch(N, take, shared);
    put_places(s, shared, DShared);
  }
}

FeedForward::Acts MoeMlp::rows(const Acts& all, size_t row0) const {
  const size_t E = experts_, R0 = row0 * k_, H = hidden_, C = C_;
  const auto at = [](float* p, size_t off) { return p ? p + off : nullptr; };
  Acts a{};
  a[Logits] = all[Logits] + row0 * E;
  a[Probs] = all[Probs] + row0 * E;
  a[Lse] = all[Lse] + row0;
  for (int p : {Expert, Weight, Pos, Src}) a[p] = all[p] + R0;
  a[Xp] = all[Xp] + R0 * C;
  for (int p : {Fc, Gate, Act}) a[p] = at(all[p], R0 * H);
  a[Yp] = all[Yp] + R0 * C;
  if (shared_) put_places(a, shared_->rows(places_from(all, Shared), row0), Shared);
  return a;
}

FeedForward::Report MoeMlp::forward(const float* params, const Acts& a, const float* in, float* out,
                                    int N, bool lead, TensorCollectives& comm) const {
  const int E = experts_, C = C_, H = hidden_, R = N * k_;
  const auto P = [params](size_t off) { return off == kAbsent ? nullptr : params + off; };
  // route: logits (N, E) = in · routerᵀ, the top k per token, their rows grouped by expert
  k::matmul_forward(a[Logits], in, params + router_, nullptr, N, C, E);
  k::moe_router_forward(a[Probs], a[Lse], ints(a[Expert]), a[Weight], a[Logits], params + bias_, N, E, k_);
  const std::vector<int32_t> offsets = expert_offsets(ints(a[Expert]), R, E);
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  for (int i = 0; i < R; ++i) {  // choice i = (token i / k, rank i % k)
    const int32_t row = next[ints(a[Expert])[i]]++;
    ints(a[Pos])[i] = row;
    ints(a[Src])[row] = i / k_;
  }
  // the experts on their rows, then the weighted combine (onto the shared expert's output)
  k::moe_permute(a[Xp], in, ints(a[Src]), R, C);
  // one grouped linear: out (R, OC) = the experts' weight w (E, OC, IC) on their rows of x (R, IC)
  const auto grouped = [&](float* out, const float* x, size_t w, const std::vector<kernels::bf16>& w_bf16,
                           size_t b, int IC, int OC) {
    if (dtype_ == kernels::DType::BF16)
      k::moe_grouped_forward_bf16(out, x, w_bf16.data(), P(b), offsets.data(), E, IC, OC);
    else
      k::moe_grouped_forward(out, x, params + w, P(b), offsets.data(), E, IC, OC);
  };
  grouped(a[Fc], a[Xp], fc_w_, fc_bf16_, fc_b_, C, H);
  if (gate_w_ != kAbsent) grouped(a[Gate], a[Xp], gate_w_, gate_bf16_, gate_b_, C, H);
  mlp_activation_forward(kind_, a[Act], a[Gate], a[Fc], size_t(R) * H);
  grouped(a[Yp], a[Act], proj_w_, proj_bf16_, proj_b_, H, C);
  if (shared_) shared_->forward(params, places_from(a, Shared), in, out, N, lead, comm);
  k::moe_unpermute(out, a[Yp], ints(a[Pos]), a[Weight], N, k_, C, shared_ != nullptr);

  Report report;
  report.load.resize(E);
  for (int e = 0; e < E; ++e) report.load[e] = offsets[e + 1] - offsets[e];
  if (moe_.aux_loss_coef > 0) {
    double balance = 0;  // Σ_e f_e · P_e, P_e = Σ_n p_ne / N
    for (int e = 0; e < E; ++e) {
      double mass = 0;
      for (int n = 0; n < N; ++n) mass += a[Probs][size_t(n) * E + e];
      balance += double(report.load[e]) / R * mass / N;
    }
    report.auxiliary.emplace_back("moe_balance", float(moe_.aux_loss_coef * E * balance));
  }
  if (moe_.z_loss_coef > 0) {
    double z = 0;
    for (int n = 0; n < N; ++n) z += double(a[Lse][n]) * a[Lse][n];
    report.auxiliary.emplace_back("moe_z", float(moe_.z_loss_coef * z / N));
  }
  return report;
}

void MoeMlp::backward(const float* params, float* grads, const Acts& a, const float* in, const float* dout,
                      float* din, const Scratch& s, int N, float aux_scale, TensorCollectives& comm) const {
  const int E = experts_, C = C_, H = hidden_, R = N * k_;
  const auto G = [grads](size_t off) { return off == kAbsent ? nullptr : grads + off; };
  const std::vector<int32_t> offsets = expert_offsets(ints(a[Expert]), R, E);
  // the combine, the experts, the gather
  k::moe_unpermute_backward(s[DYp], s[DWeight], dout, a[Yp], ints(a[Pos]), a[Weight], N, k_, C);
  // one grouped linear's backward: dx (R, IC) = (or +=) dy · w, dw, db += (the forward's grouped)
  const auto grouped = [&](float* dx, const float* dy, const float* x, size_t w,
                           const std::vector<kernels::bf16>& w_bf16, size_t b, int IC, int OC, bool accumulate) {
    if (dtype_ == kernels::DType::BF16)
      k::moe_grouped_backward_bf16(dx, grads + w, G(b), dy, x, w_bf16.data(), offsets.data(), E, IC, OC, accumulate);
    else
      k::moe_grouped_backward(dx, grads + w, G(b), dy, x, params + w, offsets.data(), E, IC, OC, accumulate);
  };
  grouped(s[DAct], s[DYp], a[Act], proj_w_, proj_bf16_, proj_b_, H, C, false);
  mlp_activation_backward(kind_, s[DGate], s[DFc], s[DAct], a[Gate], a[Fc], size_t(R) * H);
  grouped(s[DXp], s[DFc], a[Xp], fc_w_, fc_bf16_, fc_b_, C, H, false);
  if (gate_w_ != kAbsent) grouped(s[DXp], s[DGate], a[Xp], gate_w_, gate_bf16_, gate_b_, C, H, true);
  if (shared_)
    shared_->backward(params, grads, places_from(a, Shared), in, dout, din, places_from(s, DShared), N,
                      aux_scale, comm);
  k::moe_unpermute(din, s[DXp], ints(a[Pos]), nullptr, N, k_, C, shared_ != nullptr);
  // the router: the combine weights' gradient and the balancing losses'
  std::vector<float> dprobs;  // the Switch loss: d/d p_ne = coef · E · f_e / N
  if (moe_.aux_loss_coef > 0)
    for (int e = 0; e < E; ++e)
      dprobs.push_back(aux_scale * moe_.aux_loss_coef * E * float(offsets[e + 1] - offsets[e]) / R / N);
  const float dlse = aux_scale * 2 * moe_.z_loss_coef / N;  // z-loss: d/d lse_n = 2 coef lse_n / N
  k::moe_router_backward(s[DLogits], s[DWeight], a[Probs], a[Lse], ints(a[Expert]), a[Weight],
                         dprobs.empty() ? nullptr : dprobs.data(), dlse, N, E, k_);
  k::matmul_backward(din, grads + router_, nullptr, s[DLogits], in, params + router_, N, C, E, true);
}

void MoeMlp::add_flops(double N, bool runs, bool trains, ComponentFlops& f) const {
  const double R = N * k_, H = hidden_, C = C_;
  const int per_row = config_gated(kind_) ? 3 : 2;  // fc (and gate) and proj, 2·H·C each
  add_product_flops(2 * N * experts_ * C, runs, trains, f);
  add_product_flops(per_row * 2 * R * H * C, runs, trains, f);
  if (shared_) shared_->add_flops(N, runs, trains, f);
}

void MoeMlp::set_dtype(kernels::DType dtype) {
  dtype_ = dtype;
  if (dtype != kernels::DType::BF16) fc_bf16_ = gate_bf16_ = proj_bf16_ = {};
}

void MoeMlp::refresh(const float* params) {
  if (dtype_ != kernels::DType::BF16) return;
  FRUGAL_PROFILE("bf16 weight rounding");
  const size_t n = size_t(experts_) * hidden_ * C_;  // each of c_fc, c_gate, c_proj
  const auto round = [&](std::vector<kernels::bf16>& copy, size_t w) {
    copy.resize(w == kAbsent ? 0 : n);
    if (w != kAbsent) k::f32_to_bf16(copy.data(), params + w, n);
  };
  round(fc_bf16_, fc_w_);
  round(gate_bf16_, gate_w_);
  round(proj_bf16_, proj_w_);
}

size_t MoeMlp::working_copy_bytes() const {
  return (fc_bf16_.size() + gate_bf16_.size() + proj_bf16_.size()) * sizeof(kernels::bf16);
}

void MoeMlp::balance(float* params, const std::vector<double>& load) const {
  double mean = 0;
  for (double l : load) mean += l;
  mean /= experts_;
  float* bias = params + bias_;
  for (int e = 0; e < experts_; ++e)
    bias[e] += load[e] < mean ? moe_.bias_rate : load[e] > mean ? -moe_.bias_rate : 0.0f;
}

}  // namespace frugal
