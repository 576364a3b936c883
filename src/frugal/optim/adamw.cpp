// AdamW, clipping and schedule; see adamw.h.
#include "frugal/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "frugal/core/error.h"

#include "frugal/kernels/ops.h"

namespace frugal {

float lr_at(const AdamWConfig& c, int64_t step, int64_t max_steps) {
  if (step < c.warmup_steps) return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  if (step >= max_steps) return c.min_lr;
  if (c.schedule == ScheduleKind::Wsd) {
    const int64_t decay_steps = std::llround(double(c.decay_fraction) * double(max_steps));
    const int64_t decay_begin = std::max<int64_t>(c.warmup_steps, max_steps - decay_steps);
    if (step < decay_begin) return c.lr;
    const double progress = double(step - decay_begin) / double(max_steps - decay_begin);  // [0, 1)
    const double left = c.decay_shape == DecayShape::Linear   ? 1.0 - progress
                        : c.decay_shape == DecayShape::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress))
                                                              : 1.0 - std::sqrt(progress);
    return static_cast<float>(c.min_lr + left * (c.lr - c.min_lr));
  }
  const double progress = static_cast<double>(step - c.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, max_steps - c.warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(c.min_lr + cosine * (c.lr - c.min_lr));
}

AdamW::AdamW(const ParamTable& table, const AdamWConfig& config)
    : AdamW(table, config, table.owned_begin(), table.total()) {}

AdamW::AdamW(const ParamTable& table, const AdamWConfig& config, size_t shard_begin, size_t shard_end)
    : table_(table), config_(config), shard_begin_(shard_begin), shard_end_(shard_end) {
  FRUGAL_CHECK(table.owned_begin() <= shard_begin && shard_begin <= shard_end && shard_end <= table.total(),
               "internal: optimizer shard [{}, {}) outside the {} parameters from {} it updates", shard_begin,
               shard_end, table.total(), table.owned_begin());
}

void AdamW::allocate_state() {
  if (m_.size() == shard_end_ - shard_begin_) return;
  m_.resize(shard_end_ - shard_begin_);
  v_.resize(shard_end_ - shard_begin_);
}

float AdamW::grad_norm(const float* grads, size_t begin, size_t end) {
  return static_cast<float>(std::sqrt(kernels::sum_squares(grads + begin, end - begin)));
}

float AdamW::step(float* params, float* grads, size_t begin, float lr) {
  const float norm = clip(grads, begin);
  update(params, grads, begin, lr);
  return norm;
}

void AdamW::feed_grad_norm(kernels::SumSquaresStream& stream, const float* grads, size_t begin) const {
  kernels::sum_squares_feed(stream, grads + begin, table_.total() - begin);
}

float AdamW::clip_scale(float norm) const {
  return config_.grad_clip > 0.0f && norm > config_.grad_clip ? config_.grad_clip / (norm + 1e-6f) : 1.0f;
}

void AdamW::clip_to(float* grads, size_t begin, float norm, size_t end) const {
  if (end == 0) end = table_.total();
  if (const float scale = clip_scale(norm); scale != 1.0f) kernels::scale_inplace(grads + begin, end - begin, scale);
}

float AdamW::clip(float* grads, size_t begin) const {
  const float norm = grad_norm(grads, begin, table_.total());
  clip_to(grads, begin, norm);
  return norm;
}

namespace {
// The working copy of the tensor at `offset`, or null.
const WorkingCopy* copy_of(const std::vector<WorkingCopy>& copies, size_t offset) {
  for (const WorkingCopy& c : copies)
    if (c.offset == offset) return &c;
  return nullptr;
}
}  // namespace

void AdamW::update(float* params, const float* grads, size_t begin, float lr, size_t end,
                   const std::vector<WorkingCopy>& copies, float grad_scale) {
  FRUGAL_CHECK(grad_scale == 1.0f || folds_clip_scale(), "internal: a gradient scale for a Muon update");
  ++t_;
  const kernels::AdamWStep s{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, t_, grad_scale};
  allocate_state();
  const size_t lo = std::max(begin, shard_begin_), hi = std::min(end == 0 ? table_.total() : end, shard_end_);
  std::vector<MuonTensor> muon_tensors;  // updated together after AdamW's
  for (const ParamInfo& e : table_.entries()) {
    if (e.offset < begin) continue;  // frozen: a whole tensor or nothing
    const size_t b = std::max(e.offset, lo), e_end = std::min(e.offset + e.numel, hi);
    if (b >= e_end) continue;
    const size_t o = b - shard_begin_;
    const WorkingCopy* copy = copy_of(copies, e.offset);
    if (const MuonMatrices muon = config_.muon.enabled ? muon_matrices(e) : MuonMatrices{}; muon.count > 0) {
      FRUGAL_CHECK(b == e.offset && e_end == e.offset + e.numel, "internal: the optimizer shard [{}, {}) cuts "
                   "the Muon matrix {}", shard_begin_, shard_end_, e.name);
      muon_tensors.push_back({params + b, grads + b, m_.data() + o, muon, copy});
      continue;
    }
    kernels::AdamWStep tensor_step = s;
    if (e.untied_head && config_.head_lr > 0) tensor_step.lr = lr * config_.head_lr / config_.lr;
    // [b, split) has a working copy, [split, e_end) none
    const size_t split = copy ? std::clamp(copy->offset + copy->numel, b, e_end) : b;
    if (split > b)
      kernels::adamw_update_bf16(params + b, copy->data + (b - copy->offset), grads + b, m_.data() + o,
                                 v_.data() + o, split - b, tensor_step, e.decays(),
                                 copy->rounding.from(b - copy->offset));
    if (e_end > split)
      kernels::adamw_update(params + split, grads + split, m_.data() + o + (split - b), v_.data() + o + (split - b),
                            e_end - split, tensor_step, e.decays());
  }
  if (!muon_tensors.empty()) muon_update(muon_tensors, config_.muon, lr * config_.muon.lr / config_.lr);
}

}  // namespace frugal
