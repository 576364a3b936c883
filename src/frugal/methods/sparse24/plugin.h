// The `sparse24` method plugin: 2:4 structured-sparse pretraining (METHODS.md section 4; Hu et al.,
// ICML 2024). The FFN linears (fc, c_gate for gated MLPs, fc_proj; optionally the attention
// projections) run with a 2:4 mask through Sparse24Format while the dense master weights are
// trained with the straight-through estimator:
// - masks: transposable 4x4-block search (or row-only 2:4) from the dense weights at FitStart and
//   then every `mask_interval` steps at the Reconfigure after the optimizer step; the flip rate
//   (fraction of mask entries changed since the previous mask) goes into the step's metrics
//   record as "flip_rate" at every mask update (logged when that step is logged: keep
//   train.log_interval a divisor of mask_interval);
// - masked decay g ← g + λ_W·(1 − m)⊙W at BeforeOptimStep, which the trainer fires after gradient
//   clipping and before the AdamW update;
// - dense fine-tuning: the formats are removed at the Reconfigure after step
//   max_steps − round(max_steps · dense_finetune_fraction), and the rest of the run is dense.
// - a reshape (the V-cycle's level change, at a Reconfigure before this method's): the targets
//   are the new model's linears, their masks searched from the mapped weights at once (every
//   level keeps the head size, a multiple of 8, so its widths divide into 4x4 blocks).
// State (masks, mask-update count, last flip rate, phase) is saved with every checkpoint.
#pragma once
#include <memory>
#include <vector>

#include "frugal/methods/method.h"
#include "frugal/model/formats/sparse24.h"

namespace frugal::sparse24 {

struct Sparse24Config {
  int mask_interval = 40;               // steps between mask recomputations
  double decay = 6e-5;                  // λ_W of the masked decay
  bool transposable = true;             // false: row-only 2:4 (dense input gradient)
  double dense_finetune_fraction = 1.0 / 6;
  bool include_attention = false;       // also mask the attention qkv and output projections
  bool mvue = false;                    // MVUE 2:4 estimator for the weight gradient
};

MethodInfo method_info();

// The block linears 2:4 masks: the FFN's (fc, c_gate, fc_proj), and the attention projections
// (qkv, proj) with include_attention. Another mask owner beside it (mst) leaves these alone.
std::vector<GPT::Linear> masked_linears(bool include_attention);

class Sparse24Method final : public Method {
 public:
  explicit Sparse24Method(Sparse24Config config) : config_(config) {}
  std::string name() const override { return "sparse24"; }
  Capabilities capabilities() const override { return {.owns_masks = true, .follows_reshape = true}; }
  bool match(Event event, const TrainContext& ctx) const override;
  void apply(Event event, TrainContext& ctx) override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;
  // In the sparse phase: the saved masks as Sparse24Formats; after it (dense fine-tuning) nothing.
  std::string restore_trained_function(TrainContext& ctx) override;
  // Added on a resume: the masks come from the current weights, as after --init-from; the dense
  // phase still starts at its fraction of train.max_steps.
  std::string cannot_start_mid_run() const override { return {}; }

  // One masked linear: its place in the model and its mask (OC, IC), 1 = kept: the method's copy
  // (searched, decayed, saved), handed to the format (which keeps its own) at every mask update.
  struct Target {
    int layer = 0;
    GPT::Linear which = GPT::Linear::Fc;
    int OC = 0, IC = 0;
    std::vector<uint8_t> mask;
    std::shared_ptr<Sparse24Format> format;
  };
  const std::vector<Target>& targets() const { return targets_; }
  bool sparse_active() const { return installed_; }
  int64_t mask_updates() const { return mask_updates_; }
  double last_flip_rate() const { return flip_rate_; }
  // First step that runs dense (max_steps when there is no dense fine-tuning).
  int64_t dense_start(int64_t max_steps) const;

 private:
  void build_targets(const GPT& model);
  // Recomputes every mask from the current weights (of the blocks this rank holds; the others'
  // come from their holder); returns the flip rate against the old masks.
  double compute_masks(const TrainContext& ctx);
  // Installs (sparse) or removes the formats through the session, on every block, held or not.
  void install(Session& session, bool sparse);
  void apply_masked_decay(TrainContext& ctx) const;
  // After a reshape: targets, masks and formats of the new model's linears (masks from its weights).
  void follow_reshape(TrainContext& ctx);

  enum class Pending { None, UpdateMasks, GoDense };
  Sparse24Config config_;
  std::vector<Target> targets_;
  bool installed_ = false, finetune_ = false, have_masks_ = false;
  Pending pending_ = Pending::None;
  int64_t mask_updates_ = 0;
  double flip_rate_ = 0;
};

}  // namespace frugal::sparse24
