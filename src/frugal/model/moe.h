// MoeMlp: the mixture-of-experts feed-forward branch (ModelConfig::moe), a FeedForward in place of
// the dense MLP. A router (E, C) in fp32 gives each token a softmax over the E experts; the token
// goes to the top_k experts of largest probability (plus the balancing bias, which steers the
// choice only; ties to the lower expert index, so routing is deterministic) and its output is the
// sum of their outputs weighted by their probabilities renormalised over the top k (GShard,
// Mixtral). Dropless: every token reaches its k experts, no capacity factor. Each forward groups
// the N·k routed rows by expert (a stable counting sort: token order within an expert), gathers
// the inputs, runs each expert's MLP as one GEMM per expert on its rows (kernels' moe family), and
// combines; the backward runs the same steps in reverse and through the router. With
// shared_expert, a dense MLP every token passes through is added.
//
// Balancing, each reported as an auxiliary loss of the forward (weighted by its coefficient):
// the Switch loss aux_loss_coef · E · Σ_e f_e · P_e (f_e: the share of the N·k routed rows that
// expert e received, P_e: its mean probability; Megatron's top-k form, = aux_loss_coef when
// balanced), and the router z-loss z_loss_coef · mean_n logsumexp(logits_n)². The
// auxiliary-loss-free balancing (DeepSeek-V3) moves a per-expert bias, a buffer of the model
// (ParamRole::Buffer, so it is checkpointed), by bias_rate · sign(mean load − load) after each
// optimizer step (balance()).
//
// Tensors of block L (prefix transformer.h.L.mlp.): router.weight (E, C), router.balance_bias
// (E), experts.c_fc.weight (E, H, C) (and .bias (E, H)), experts.c_gate (gated MLPs), experts.c_proj
// (E, C, H) (and .bias (E, C)), and the shared expert's shared_expert.c_fc, ... The experts' tensors
// split by expert over an expert-parallel group of P ranks (Placement::experts: rank r holds experts
// r·E/P .. (r+1)·E/P − 1); the router, its bias and the shared expert are replicated. No tensor
// parallelism yet. Under train.precision = "bf16" the experts' GEMMs run on bf16 working copies of
// their weights (the router and the shared expert stay fp32).
//
// Expert parallelism (P > 1; each rank routes its own tokens): the N·k routed rows, grouped by
// expert, are grouped by the rank holding the expert too. The ranks exchange the rows' counts per
// expert (all-to-all of E/P ints per rank), then the rows (all-to-all of variable sizes); each rank
// regroups the rows it received by local expert (source rank order within an expert), runs its
// experts on them, and sends the outputs back the way they came; the combine is one process's.
// The backward is the mirror: the outputs' gradients travel to the experts, the inputs' gradients
// back. A rank may receive up to P·N·min(k, E/P) rows (dropless: every token may choose its
// experts on one rank), and lays out its experts' activations for that many.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "frugal/model/branches.h"

namespace frugal {

// The routing of a model's mixture-of-experts blocks over some training forwards: per block (in
// layer order) the rows each expert received, and each auxiliary loss (summed over the blocks of
// a forward) summed over the forwards.
struct RoutingStats {
  std::vector<int> layers;  // the blocks with a mixture of experts
  int experts = 0;
  std::vector<double> load;  // (layers, experts)
  std::vector<std::pair<std::string, double>> auxiliary;
  double forwards = 0;
  RoutingStats() = default;
  RoutingStats(const ModelConfig& config, const BlockRange& range);
  // Adds block `layer`'s report of one forward; adds other's counts (its layers among these).
  void add(int layer, const FeedForward::Report& report);
  void add(const RoutingStats& other);
  void clear();
  // Every number in one vector, and back (what a sum over ranks exchanges).
  std::vector<double> values() const;
  void set_values(const std::vector<double>& values);
};

class MoeMlp final : public FeedForward {
 public:
  static void declare(ModelSpec& spec, const std::string& prefix, int layer);
  // shard: this rank's place in its expert-parallel group (and tensor-parallel group: size 1).
  MoeMlp(const ModelConfig& config, const LocalSizes& sizes, const ShardCoord& shard, const std::string& prefix,
         const ParamTable& table, const std::shared_ptr<LinearFormat>& dense);

  void lay_out(double N, const Take& take, Acts& a, kernels::DType dtype) const override;
  void lay_out_scratch(double N, const Take& take, Scratch& s) const override;
  Acts rows(const Acts& all, size_t row0) const override;
  // The experts' linears run through no LinearFormat: every BlockLinear is absent.
  LinearSlot& linear(BlockLinear) override { return absent_; }
  const LinearSlot& linear(BlockLinear) const override { return absent_; }
  Report forward(const float* params, const Acts& a, const LinearInput& in, float* out, int N, bool lead,
                 TensorCollectives& comm) const override;
  void backward(const float* params, float* grads, const Acts& a, const LinearInput& in, const float* dout,
                float* din, const Scratch& s, int N, float aux_scale, TensorCollectives& comm) const override;
  // The router and the top_k active experts (and the shared one).
  void add_flops(double N, bool runs, bool trains, ComponentFlops& f) const override;

  // The experts' GEMMs in bf16 (FeedForward::set_dtype): their weights rounded by refresh().
  void set_dtype(kernels::DType dtype, const WeightRounding& rounding) override;
  void refresh(const float* params) override;
  size_t working_copy_bytes() const override;

  // The auxiliary-loss-free update of the balancing bias in params from the rows each expert
  // received over a step, load (E): bias_e += bias_rate · sign(mean load − load_e).
  void balance(float* params, const std::vector<double>& load) const;

 private:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  // Acts places, per N rows (R = N·k routed rows; Q = N·capacity_ the rows this rank's experts may
  // receive, Q = R in one process); int32 places hold indices.
  enum Place {
    Logits,  // (N, E) the router's
    Probs,   // (N, E)
    Lse,     // (N) logsumexp of the logits
    Expert,  // int32 (N, k) the chosen experts, best first
    Weight,  // (N, k) their combine weights
    Pos,     // int32 (N, k) the routed row of each choice
    Src,     // int32 (R) the token of each routed row
    Xp,      // (Q, C) the inputs of this rank's experts, grouped by expert
    Fc,      // (Q, H), and Gate (gated MLPs), Act
    Gate,
    Act,
    Yp,      // (Q, C) the experts' outputs
    Routed,  // P > 1: (R, C) this rank's routed rows by expert: the inputs sent, then the outputs back
    Wire,    // P > 1: (Q, C) the rows received (by source rank), then the outputs to send back
    Counts,  // P > 1: int32 (2E per row, the first 2E used) the rows sent per expert, then received
    Shared,  // the shared expert's places from here
  };
  // Scratch places: the gradients of Logits, Weight, Yp, Fc, Gate, Act, Xp, Routed, Wire, then the
  // shared expert's.
  int k_, experts_, hidden_, C_;
  int ranks_, local_;  // the expert-parallel group's size; the experts this rank holds
  int capacity_;               // rows this rank's experts may receive per token of a rank: P·min(k, E/P)
  MlpKind kind_;
  MoeConfig moe_;
  size_t router_, bias_;  // router.weight (E, C), router.balance_bias (E)
  size_t fc_w_, fc_b_, gate_w_, gate_b_, proj_w_, proj_b_;  // kAbsent when missing
  std::unique_ptr<DenseMlp> shared_;
  LinearSlot absent_;
  // With dtype_ BF16: the experts' c_fc, c_gate (gated MLPs) and c_proj weights rounded to bf16.
  kernels::DType dtype_ = kernels::DType::F32;
  std::vector<kernels::bf16> fc_bf16_, gate_bf16_, proj_bf16_;
  kernels::Bf16Rounding fc_rounding_, gate_rounding_, proj_rounding_;  // how each is rounded
};

}  // namespace frugal
