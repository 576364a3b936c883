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
enum ScratchPlace { DLogits, DWeight, DYp, DFc, DGate, DAct, DXp, DRouted, DWire, DShared };

int32_t* ints(float* place) { return reinterpret_cast<int32_t*>(place); }

// offsets (E + 1): where each expert's rows start among the N·k routed rows, from expert (N, k).
std::vector<int32_t> expert_offsets(const int32_t* expert, int R, int E) {
  std::vector<int32_t> offsets(E + 1, 0);
  for (int i = 0; i < R; ++i) ++offsets[expert[i] + 1];
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  return offsets;
}

// How an expert-parallel exchange moves the routed rows, from the counts a rank sent (E: its rows
// per expert, so per destination rank `local` consecutive experts) and received (ranks × local:
// from each source rank, its rows for each of this rank's experts).
struct Exchange {
  std::vector<int32_t> send_rows, recv_rows;  // (ranks) rows to, and from, each rank
  std::vector<int32_t> order;    // (received) row i grouped by local expert = received row order[i]
  std::vector<int32_t> inverse;  // (received) and back: received row j = grouped row inverse[j]
  std::vector<int32_t> offsets;  // (local + 1) each local expert's rows among the grouped
  int received() const { return offsets.back(); }
};

Exchange exchange_of(const int32_t* sent, const int32_t* received, int ranks, int local) {
  Exchange x;
  x.send_rows.assign(ranks, 0);
  x.recv_rows.assign(ranks, 0);
  std::vector<int32_t> start(size_t(ranks) * local);  // of (source, expert)'s rows among the received
  int32_t at = 0;
  for (int r = 0; r < ranks; ++r)
    for (int j = 0; j < local; ++j) {
      x.send_rows[r] += sent[r * local + j];
      x.recv_rows[r] += received[r * local + j];
      start[r * local + j] = at;
      at += received[r * local + j];
    }
  x.offsets.assign(local + 1, 0);
  x.order.reserve(at);
  for (int j = 0; j < local; ++j) {  // by expert, then by source rank: the experts' row order
    for (int r = 0; r < ranks; ++r)
      for (int32_t i = 0; i < received[r * local + j]; ++i) x.order.push_back(start[r * local + j] + i);
    x.offsets[j + 1] = int32_t(x.order.size());
  }
  x.inverse.resize(at);
  for (int32_t i = 0; i < at; ++i) x.inverse[x.order[i]] = i;
  return x;
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

MoeMlp::MoeMlp(const ModelConfig& config, const LocalSizes& sizes, const ShardCoord& shard,
               const std::string& prefix, const ParamTable& table, const std::shared_ptr<LinearFormat>& dense)
    : k_(config.moe.top_k),
      experts_(config.moe.experts),
      hidden_(config.expert_hidden()),
      C_(config.n_embd),
      ranks_(shard.expert_size),
      local_(experts_ / ranks_),
      capacity_(ranks_ == 1 ? k_ : ranks_ * std::min(k_, local_)),
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
  FRUGAL_CHECK(shard.size == 1, "model.moe does not run under tensor parallelism yet; use "
               "parallel.tensor = 1 or model.moe.experts = 0");
  FRUGAL_CHECK(experts_ % ranks_ == 0, "model.moe.experts = {} does not divide over {} expert-parallel ranks; "
               "set parallel.expert to a divisor of it", experts_, ranks_);
  if (moe_.shared_expert) {
    LocalSizes shared = sizes;
    shared.ffn_hidden = hidden_;
    shared_ = std::make_unique<DenseMlp>(config, shared, prefix + kShared, table, dense);
  }
}

void MoeMlp::lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const {
  const double E = experts_, R = N * k_, Q = N * capacity_, H = hidden_;
  a[Logits] = take(N * E);
  a[Probs] = take(N * E);
  a[Lse] = take(N);
  a[Expert] = take(R);
  a[Weight] = take(R);
  a[Pos] = take(R);
  a[Src] = take(R);
  a[Xp] = take(Q * C_);
  a[Fc] = take(Q * H);
  a[Gate] = config_gated(kind_) ? take(Q * H) : nullptr;
  a[Act] = take(Q * H);
  a[Yp] = take(Q * C_);
  if (ranks_ > 1) {
    a[Routed] = take(R * C_);
    a[Wire] = take(Q * C_);
    a[Counts] = take(N * 2 * E);
  }
  if (shared_) {
    Acts shared{};
    shared_->lay_out(N, take, shared, dtype);
    put_places(a, shared, Shared);
  }
}

void MoeMlp::lay_out_scratch(double N, const Take& take, Scratch& s) const {
  const double R = N * k_, Q = N * capacity_, H = hidden_;
  s[DLogits] = take(N * experts_);
  s[DWeight] = take(R);
  s[DYp] = take(Q * C_);
  s[DFc] = take(Q * H);
  s[DGate] = config_gated(kind_) ? take(Q * H) : nullptr;
  s[DAct] = take(Q * H);
  s[DXp] = take(Q * C_);
  if (ranks_ > 1) {
    s[DRouted] = take(R * C_);
    s[DWire] = take(Q * C_);
  }
  if (shared_) {
    Scratch shared{};
    shared_->lay_out_scratch(N, take, shared);
    put_places(s, shared, DShared);
  }
}

FeedForward::Acts MoeMlp::rows(const Acts& all, size_t row0) const {
  const size_t E = experts_, R0 = row0 * k_, Q0 = row0 * capacity_, H = hidden_, C = C_;
  const auto at = [](float* p, size_t off) { return p ? p + off : nullptr; };
  Acts a{};
  a[Logits] = all[Logits] + row0 * E;
  a[Probs] = all[Probs] + row0 * E;
  a[Lse] = all[Lse] + row0;
  for (int p : {Expert, Weight, Pos, Src}) a[p] = all[p] + R0;
  a[Xp] = all[Xp] + Q0 * C;
  for (int p : {Fc, Gate, Act}) a[p] = at(all[p], Q0 * H);
  a[Yp] = all[Yp] + Q0 * C;
  a[Routed] = at(all[Routed], R0 * C);
  a[Wire] = at(all[Wire], Q0 * C);
  a[Counts] = at(all[Counts], row0 * 2 * E);
  if (shared_) put_places(a, shared_->rows(places_from(all, Shared), row0), Shared);
  return a;
}

FeedForward::Report MoeMlp::forward(const float* params, const Acts& a, const LinearInput& input, float* out,
                                    int N, bool lead, TensorCollectives& comm) const {
  FRUGAL_CHECK(input.f32, "internal: a mixture of experts takes its input in fp32");
  const float* in = input.f32;
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
  // the rows to their experts (their ranks'), the experts on them, the outputs back, then the
  // weighted combine (onto the shared expert's output)
  float* routed = ranks_ > 1 ? a[Routed] : a[Xp];
  k::moe_permute(routed, in, ints(a[Src]), R, C);
  Exchange x;
  if (ranks_ > 1) {
    int32_t* counts = ints(a[Counts]);  // sent (E), received (E)
    for (int e = 0; e < E; ++e) counts[e] = offsets[e + 1] - offsets[e];
    comm.all_to_all(counts, counts + E, local_);
    x = exchange_of(counts, counts + E, ranks_, local_);
    comm.all_to_all_rows(routed, x.send_rows.data(), a[Wire], x.recv_rows.data(), C);
    k::moe_permute(a[Xp], a[Wire], x.order.data(), x.received(), C);
  } else {
    x.offsets = offsets;
  }
  const int Q = x.received();
  // one grouped linear: out (Q, OC) = this rank's experts' weight w (local, OC, IC) on their rows of x (Q, IC)
  const auto grouped = [&](float* out, const float* xs, size_t w, const std::vector<kernels::bf16>& w_bf16,
                           size_t b, int IC, int OC) {
    if (dtype_ == kernels::DType::BF16)
      k::moe_grouped_forward_bf16(out, xs, w_bf16.data(), P(b), x.offsets.data(), local_, IC, OC);
    else
      k::moe_grouped_forward(out, xs, params + w, P(b), x.offsets.data(), local_, IC, OC);
  };
  grouped(a[Fc], a[Xp], fc_w_, fc_bf16_, fc_b_, C, H);
  if (gate_w_ != kAbsent) grouped(a[Gate], a[Xp], gate_w_, gate_bf16_, gate_b_, C, H);
  mlp_activation_forward(kind_, a[Act], a[Gate], a[Fc], size_t(Q) * H);
  grouped(a[Yp], a[Act], proj_w_, proj_bf16_, proj_b_, H, C);
  if (ranks_ > 1) {
    k::moe_permute(a[Wire], a[Yp], x.inverse.data(), Q, C);
    comm.all_to_all_rows(a[Wire], x.recv_rows.data(), routed, x.send_rows.data(), C);
  }
  if (shared_) shared_->forward(params, places_from(a, Shared), input, out, N, lead, comm);
  k::moe_unpermute(out, ranks_ > 1 ? routed : a[Yp], ints(a[Pos]), a[Weight], N, k_, C, shared_ != nullptr);

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

void MoeMlp::backward(const float* params, float* grads, const Acts& a, const LinearInput& input, const float* dout,
                      float* din, const Scratch& s, int N, float aux_scale, TensorCollectives& comm) const {
  const float* in = input.f32;
  const int E = experts_, C = C_, H = hidden_, R = N * k_;
  const auto G = [grads](size_t off) { return off == kAbsent ? nullptr : grads + off; };
  const std::vector<int32_t> offsets = expert_offsets(ints(a[Expert]), R, E);
  Exchange x;
  if (ranks_ > 1)
    x = exchange_of(ints(a[Counts]), ints(a[Counts]) + E, ranks_, local_);
  else
    x.offsets = offsets;
  const int Q = x.received();
  // the combine; the outputs' gradients to the experts' ranks
  float* droutes = ranks_ > 1 ? s[DRouted] : s[DYp];
  k::moe_unpermute_backward(droutes, s[DWeight], dout, ranks_ > 1 ? a[Routed] : a[Yp], ints(a[Pos]), a[Weight],
                            N, k_, C);
  if (ranks_ > 1) {
    comm.all_to_all_rows(droutes, x.send_rows.data(), s[DWire], x.recv_rows.data(), C);
    k::moe_permute(s[DYp], s[DWire], x.order.data(), Q, C);
  }
  // one grouped linear's backward: dx (Q, IC) = (or +=) dy · w, dw, db += (the forward's grouped)
  const auto grouped = [&](float* dx, const float* dy, const float* xs, size_t w,
                           const std::vector<kernels::bf16>& w_bf16, size_t b, int IC, int OC, bool accumulate) {
    if (dtype_ == kernels::DType::BF16)
      k::moe_grouped_backward_bf16(dx, grads + w, G(b), dy, xs, w_bf16.data(), x.offsets.data(), local_, IC, OC,
                                   accumulate);
    else
      k::moe_grouped_backward(dx, grads + w, G(b), dy, xs, params + w, x.offsets.data(), local_, IC, OC, accumulate);
  };
  grouped(s[DAct], s[DYp], a[Act], proj_w_, proj_bf16_, proj_b_, H, C, false);
  mlp_activation_backward(kind_, s[DGate], s[DFc], s[DAct], a[Gate], a[Fc], size_t(Q) * H);
  grouped(s[DXp], s[DFc], a[Xp], fc_w_, fc_bf16_, fc_b_, C, H, false);
  if (gate_w_ != kAbsent) grouped(s[DXp], s[DGate], a[Xp], gate_w_, gate_bf16_, gate_b_, C, H, true);
  // the inputs' gradients back to the tokens' ranks, then the gather's backward
  if (ranks_ > 1) {
    k::moe_permute(s[DWire], s[DXp], x.inverse.data(), Q, C);
    comm.all_to_all_rows(s[DWire], x.recv_rows.data(), droutes, x.send_rows.data(), C);
  }
  if (shared_)
    shared_->backward(params, grads, places_from(a, Shared), input, dout, din, places_from(s, DShared), N,
                      aux_scale, comm);
  k::moe_unpermute(din, ranks_ > 1 ? droutes : s[DXp], ints(a[Pos]), nullptr, N, k_, C, shared_ != nullptr);
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

void MoeMlp::set_dtype(kernels::DType dtype, const WeightRounding& rounding) {
  dtype_ = dtype;
  if (dtype != kernels::DType::BF16) fc_bf16_ = gate_bf16_ = proj_bf16_ = {};
  const auto at = [&](size_t w) { return w == kAbsent ? kernels::Bf16Rounding{} : rounding(w); };
  fc_rounding_ = at(fc_w_);
  gate_rounding_ = at(gate_w_);
  proj_rounding_ = at(proj_w_);
}

void MoeMlp::refresh(const float* params) {
  if (dtype_ != kernels::DType::BF16) return;
  FRUGAL_PROFILE("bf16 weight rounding");
  const size_t n = size_t(local_) * hidden_ * C_;  // each of c_fc, c_gate, c_proj (this rank's experts)
  const auto round = [&](std::vector<kernels::bf16>& copy, size_t w, const kernels::Bf16Rounding& rounding) {
    copy.resize(w == kAbsent ? 0 : n);
    if (w != kAbsent) k::round_to_bf16(copy.data(), params + w, n, rounding);
  };
  round(fc_bf16_, fc_w_, fc_rounding_);
  round(gate_bf16_, gate_w_, gate_rounding_);
  round(proj_bf16_, proj_w_, proj_rounding_);
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
