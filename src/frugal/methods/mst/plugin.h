// The `mst` method plugin: Mixed Sparsity Training (METHODS.md section 3; Hu, Li, Huang 2024).
// Every block linear (qkv, proj, fc, gate for gated MLPs, fc_proj) trains as a dynamic sparse
// weight W ⊙ M through a SparseFormat (sparse kernels up to its break-even density, dense masked
// GEMMs above); the embedding and a tied head stay dense.
// - Masks: Erdős–Rényi densities per linear for the schedule's sparsity, random at the start.
//   Invariant between steps: W, AdamW's m and v are exactly 0 outside the mask (the gradients are
//   0 there: SparseFormat's weight gradient changes only kept entries, and an update step's dense
//   one is masked at AfterGradReduce; so AdamW keeps them there and nothing needs re-masking).
//   Under Muon (optim.name = "muon") the momentum stays 0 there for the same reason, but the
//   orthogonalised update is dense: W is zeroed outside the masks after every optimizer step (the
//   update projected onto the masks).
// - Topology update every `update_interval` steps t > 0, at AfterGradReduce of step t (the formats
//   compute the dense weight gradient of that step, set at its BatchStart): per trainable linear,
//   the counts of sparsity.h's update_counts toward the ER density of the schedule's sparsity at
//   the end of the new masks' run (target_step) and the cosine drop fraction ζ_t; drop the smallest |W|, grow 3 of 4 by largest |gradient| and 1 of 4 at
//   random among the previously inactive; dropped weights and the moments of dropped and grown
//   entries are zeroed; the new masks go into the formats at the Reconfigure after the step.
// - Sparsity variation: warm-up → ultra-sparse hold → restoration (sparsity.h's schedule).
// - Hybrid sparse attention: Strided(window, stride) or Fixed(block, summary) patterns in every
//   block during the hold, dense causal before and after (switched at Reconfigure points).
// - `dynamic = false` keeps the initial mask for the whole run (the static-sparse control);
//   constant sparsity (initial = peak = final) with `dynamic = true` is RigL.
// Beside methods.sparse24 it leaves 2:4's linears (the FFN's) alone and masks the rest.
// Frozen layers (methods.freeze) keep their masks. After a reshape by another method (the V-cycle
// of methods.multilevel), the masks of the new shapes keep the largest mapped weights at the
// current sparsity. State: the masks and counters (JSON).
#pragma once
#include <memory>
#include <vector>

#include "frugal/kernels/attention_pattern.h"
#include "frugal/methods/mask_codec.h"
#include "frugal/methods/method.h"
#include "frugal/methods/mst/sparsity.h"
#include "frugal/model/formats/sparse.h"

namespace frugal::mst {

struct MstConfig {
  SparsitySchedule schedule;
  bool dynamic = true;
  int update_interval = 100;     // Δ
  double drop_fraction = 0.3;    // ζ
  double random_growth = 0.25;   // share of the grown weights chosen at random (Mixed-Growing)
  bool erdos_renyi = true;       // false: the same density in every linear
  // The model's own attention (causal; bidirectional in an encoder) and the pattern of the
  // ultra-sparse hold (dense_attention: none).
  kernels::AttentionPattern dense_attention = kernels::AttentionPattern::causal();
  kernels::AttentionPattern attention = kernels::AttentionPattern::strided(16, 16);
  // Block linears another mask owner holds (methods.sparse24's, when both run): never masked here.
  std::vector<GPT::Linear> left_to_others;
};

MethodInfo method_info();

class MstMethod final : public Method {
 public:
  explicit MstMethod(MstConfig config) : config_(config) {}
  std::string name() const override { return "mst"; }
  Capabilities capabilities() const override {
    return {.owns_masks = true, .follows_reshape = true, .reads_all_gradients = true};
  }
  bool match(Event event, const TrainContext& ctx) const override;
  void apply(Event event, TrainContext& ctx) override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;
  // The saved masks as SparseFormats and the attention pattern of the checkpoint's step.
  std::string restore_trained_function(TrainContext& ctx) override;
  std::string cannot_start_mid_run() const override {
    return "its sparsity schedule (the warm-up from sparsity_initial, the hold, the restoration) and "
           "drop fraction are laid out over the run from step 0, and its first masks are random";
  }

  // One sparse linear: its place in the model and its mask (OC, IC), 1 = active; the format (none
  // while the mask is full) keeps its own copy, handed over at every Reconfigure.
  struct Target {
    int layer = 0;
    GPT::Linear which = GPT::Linear::Fc;
    int OC = 0, IC = 0;
    std::vector<uint8_t> mask;
    int64_t active = 0;
    std::shared_ptr<SparseFormat> format;
    int64_t size() const { return static_cast<int64_t>(OC) * IC; }
  };
  const std::vector<Target>& targets() const { return targets_; }
  // Fraction of zeros over all targets' masks.
  double sparsity() const;
  int64_t topology_updates() const { return updates_; }
  bool is_update_step(int64_t step, int64_t max_steps) const;
  // The step whose scheduled sparsity the masks chosen after step `step` (by a topology update or
  // a reshape) aim at: the end of their run, one past the last step they train (the next update's
  // step + 1, or max_steps, where the schedule reaches sparsity_final). So every phase ends at its
  // configured sparsity: the peak by the end of the warm-up, sparsity_final at the last step.
  int64_t target_step(int64_t step, int64_t max_steps) const;

 private:
  void build_targets(const GPT& model);
  void initial_masks(uint64_t seed, int64_t max_steps);
  // After a reshape (multi-level training): the new shapes' targets, masks keeping the largest
  // mapped weights at the Erdős–Rényi densities of the sparsity at target_step.
  void follow_reshape(TrainContext& ctx);
  // Zeroes W, and unless weights_only m and v, outside every target's mask (after --init-from a
  // dense model, and after each Muon step; idempotent).
  void apply_masks_to_state(TrainContext& ctx, bool weights_only = false) const;
  void update_topology(TrainContext& ctx);
  void mask_gradients(TrainContext& ctx) const;
  // Through the session, on every block (held or not); refreshed from the weights of the held ones.
  void install_formats(Session& session);
  // Every target's mask with its block, for share_masks.
  std::vector<BlockMask> block_masks();
  kernels::AttentionPattern pattern_at(int64_t step, int64_t max_steps) const;
  void set_attention(Session& session, int64_t step, int64_t max_steps) const;
  // Every target's Erdős–Rényi (or uniform) density for the schedule's sparsity at `step`.
  std::vector<double> densities_at(int64_t step, int64_t max_steps) const;

  MstConfig config_;
  std::vector<Target> targets_;
  bool have_masks_ = false, pending_install_ = false;
  int64_t updates_ = 0, last_pruned_ = 0, last_grown_ = 0;
};

}  // namespace frugal::mst
