// AdamW over the flat parameter buffer (PyTorch semantics, decoupled weight decay on 2-D tensors
// only), global gradient-norm clipping, and the warm-up + cosine learning-rate schedule. With
// config.muon.enabled the same object is the session's two-group optimizer: Muon (optim/muon.h) for
// the hidden weight matrices, AdamW for every other tensor, the Muon momentum kept in m at the
// matrices' offsets (their v stays zero). Given a bf16 model's working copies (GPT::update_params)
// it writes their rounding as it updates the weights.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "frugal/core/memory.h"
#include "frugal/kernels/ops.h"
#include "frugal/model/param_table.h"
#include "frugal/optim/muon.h"

namespace frugal {

// The learning rate's shape after the warm-up: a cosine from lr to min_lr over the remaining
// steps, or warm-up–stable–decay (a trapezoid: lr until the last decay_fraction of the steps, then
// down to min_lr along decay_shape).
enum class ScheduleKind { Cosine, Wsd };
enum class DecayShape { Linear, Cosine, Sqrt };  // Sqrt: 1 − √progress

struct AdamWConfig {
  float lr = 6e-4f;
  float min_lr = 6e-5f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float head_lr = 0.0f;  // the untied head's peak rate, scheduled like lr; 0: lr
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // global L2 norm; <= 0 disables clipping
  int warmup_steps = 100;
  ScheduleKind schedule = ScheduleKind::Cosine;
  float decay_fraction = 0.2f;  // Wsd: the share of max_steps the decay takes
  DecayShape decay_shape = DecayShape::Linear;
  MuonConfig muon;  // enabled: Muon for the hidden matrices; its lr follows the schedule's lr / this lr
};

// Linear warm-up from lr/warmup to lr over `warmup_steps`, then the schedule's decay to min_lr at
// `max_steps` (step is 0-based; constant min_lr after max_steps): cosine over the steps after the
// warm-up, or (Wsd) constant lr until max(warmup_steps, max_steps − round(decay_fraction ·
// max_steps)), then decay_shape down to min_lr.
float lr_at(const AdamWConfig& c, int64_t step, int64_t max_steps);

class AdamW {
 public:
  // Moments for the tensors the table's range updates, [table.owned_begin(), total()).
  AdamW(const ParamTable& table, const AdamWConfig& config);
  // A ZeRO shard (stages 1 and 2): the moments exist, and update() changes parameters, only in
  // [shard_begin, shard_end) of the flat buffer; the rest belongs to other processes.
  AdamW(const ParamTable& table, const AdamWConfig& config, size_t shard_begin, size_t shard_end);

  // Global L2 norm of grads[begin, end).
  static float grad_norm(const float* grads, size_t begin, size_t end);
  // Feeds grads[begin, total) into a stream of the global norm's sum of squares. The block ranges
  // of one model (pipeline stages), each feeding its own buffer in range order, get exactly the
  // whole model's grad_norm: sqrt(kernels::sum_squares_finish(stream)).
  void feed_grad_norm(kernels::SumSquaresStream& stream, const float* grads, size_t begin) const;
  // Scales grads[begin, end) (end 0: the total) by config.grad_clip / norm when `norm`, the
  // global norm, is above it (if enabled).
  void clip_to(float* grads, size_t begin, float norm, size_t end = 0) const;
  // Clips grads[begin, total) to config.grad_clip (if enabled) and applies one AdamW step with
  // learning rate lr to every tensor starting at or after `begin` (frozen parameters form the
  // prefix [0, begin) and are left alone). Returns the gradient norm before clipping.
  // Equivalent to clip() then update(); the trainer calls the two halves separately so methods
  // can edit the clipped gradients in between (BeforeOptimStep).
  float step(float* params, float* grads, size_t begin, float lr);
  // clip_to(grad_norm of grads[begin, total)); returns that norm, the one before clipping.
  float clip(float* grads, size_t begin) const;
  // The factor clip_to multiplies the gradients by for global norm `norm` (1: no clipping).
  float clip_scale(float norm) const;
  // Whether update() can take clipping's factor as its grad_scale (not with Muon, which reads the
  // gradients of its matrices as they are).
  bool folds_clip_scale() const { return !config_.muon.enabled; }
  // One AdamW step with learning rate lr on the parameters in [begin, end) (end 0: the total)
  // within the shard: a pipeline stage updates its own slice of the buffer. With Muon, its matrices
  // take a Muon step at lr · muon.lr / config.lr; a shard must hold each of them whole or not at all.
  // `copies`: bf16 working copies of whole tensors (GPT::update_params), each updated with its
  // tensor (the rounding of every parameter changed written there). The gradients are taken as
  // grads · grad_scale (clip_scale's factor, when folds_clip_scale(): the parameters become those
  // of clip_to then update, bit for bit, without clip_to's pass over the gradients).
  void update(float* params, const float* grads, size_t begin, float lr, size_t end = 0,
              const std::vector<WorkingCopy>& copies = {}, float grad_scale = 1.0f);

  const AdamWConfig& config() const { return config_; }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // The moments of the shard: m()[i] belongs to the parameter at offset shard_begin() + i.
  // Allocated (zero) at the first use, so that an optimizer replaced before it took a step (by
  // Session::shard_optimizer) never holds the whole model's.
  float* m() { return allocate_state(), m_.data(); }
  float* v() { return allocate_state(), v_.data(); }
  size_t shard_begin() const { return shard_begin_; }
  size_t shard_end() const { return shard_end_; }
  size_t model_floats() const { return table_.total(); }
  const ParamTable& table() const { return table_; }
  // Whether other processes hold part of the moments (ZeRO).
  bool sharded() const { return shard_begin_ != table_.owned_begin() || shard_end_ != table_.total(); }
  size_t state_bytes() const { return 2 * (shard_end_ - shard_begin_) * sizeof(float); }

 private:
  void allocate_state();

  const ParamTable& table_;
  AdamWConfig config_;
  size_t shard_begin_, shard_end_;
  Buffer<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace frugal
