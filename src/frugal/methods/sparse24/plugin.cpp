// The sparse24 plugin; see plugin.h.
#include "frugal/methods/sparse24/plugin.h"

#include <fmt/format.h>

#include <cmath>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/core/rng.h"
#include "frugal/methods/mask_codec.h"
#include "frugal/methods/sparse24/mask.h"

namespace frugal::sparse24 {

namespace {

void add_keys(io::ConfigSchema& s, const std::string& p) {
  using io::Range;
  s.add_int(p + ".mask_interval", 40, "steps between mask recomputations from the dense weights", Range::at_least(1))
      .add_float(p + ".decay", 6e-5, "masked decay lambda_W: g += lambda_W (1 - m) W after clipping, before AdamW", Range::at_least(0))
      .add_bool(p + ".transposable", true, "transposable 4x4-block masks (both products 2:4); false: row-only 2:4, dense input gradient")
      .add_float(p + ".dense_finetune_fraction", 1.0 / 6, "last fraction of the steps trained dense", Range::closed(0, 1))
      .add_bool(p + ".include_attention", false, "also mask the attention qkv and output projections")
      .add_bool(p + ".mvue", false, "MVUE 2:4 estimate of the output gradient in the weight gradient");
}

std::unique_ptr<Method> make(const io::Config& c, const std::string& p) {
  Sparse24Config s;
  s.mask_interval = c.get_int32(p + ".mask_interval");
  s.decay = c.get_float(p + ".decay");
  s.transposable = c.get_bool(p + ".transposable");
  s.dense_finetune_fraction = c.get_float(p + ".dense_finetune_fraction");
  s.include_attention = c.get_bool(p + ".include_attention");
  s.mvue = c.get_bool(p + ".mvue");
  return std::make_unique<Sparse24Method>(s);
}

}  // namespace

MethodInfo method_info() {
  return {"sparse24", "2:4 structured-sparse pretraining of the FFN linears (transposable masks, masked decay, dense fine-tuning)",
          add_keys, make, {}};
}

std::vector<GPT::Linear> masked_linears(bool include_attention) {
  std::vector<GPT::Linear> which = {GPT::Linear::Fc, GPT::Linear::Gate, GPT::Linear::FcProj};
  if (include_attention) which.insert(which.begin(), {GPT::Linear::Qkv, GPT::Linear::Proj});
  return which;
}

int64_t Sparse24Method::dense_start(int64_t max_steps) const {
  return max_steps - std::llround(static_cast<double>(max_steps) * config_.dense_finetune_fraction);
}

void Sparse24Method::build_targets(const GPT& model) {
  const ModelConfig& c = model.config();
  FRUGAL_CHECK(c.n_embd % 4 == 0 && c.ffn_hidden() % 4 == 0,
               "methods.sparse24 needs model.n_embd ({}) and the FFN width ({}) divisible by 4 for "
               "4x4 mask blocks; change the model size or disable the method", c.n_embd, c.ffn_hidden());
  targets_.clear();
  for (int l = 0; l < c.n_layer; ++l)
    for (GPT::Linear w : masked_linears(config_.include_attention)) {
      if (model.linear_weight_offset(l, w) == GPT::kAbsent) continue;
      Target t;
      t.layer = l;
      t.which = w;
      std::tie(t.OC, t.IC) = model.linear_shape(w);
      t.mask.assign(static_cast<size_t>(t.OC) * t.IC, 0);
      targets_.push_back(std::move(t));
    }
}

double Sparse24Method::compute_masks(const TrainContext& ctx) {
  const GPT& model = ctx.model();
  std::vector<std::vector<uint8_t>> fresh(targets_.size());
  std::vector<BlockMask> shared;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    fresh[i].resize(t.mask.size());
    shared.push_back({t.layer, &fresh[i]});
    if (!model.range().contains(t.layer)) continue;  // another pipeline stage chooses it
    const float* W = model.params() + model.linear_weight_offset(t.layer, t.which);
    if (config_.transposable)
      transposable_mask_24(W, t.OC, t.IC, fresh[i].data());
    else
      row_mask_24(W, t.OC, t.IC, fresh[i].data());
  }
  share_masks(ctx, shared);
  size_t changed = 0, total = 0;
  for (size_t i = 0; i < targets_.size(); ++i) {
    Target& t = targets_[i];
    changed += static_cast<size_t>(std::llround(flip_rate(t.mask.data(), fresh[i].data(), fresh[i].size()) * fresh[i].size()));
    total += fresh[i].size();
    t.mask.swap(fresh[i]);
  }
  const bool first = !have_masks_;
  have_masks_ = true;
  return first || total == 0 ? 0.0 : static_cast<double>(changed) / static_cast<double>(total);
}

void Sparse24Method::install(Session& session, bool sparse) {
  for (Target& t : targets_) {
    if (sparse && !t.format)
      t.format = std::make_shared<Sparse24Format>(t.OC, t.IC, t.mask, config_.transposable, config_.mvue);
    session.set_linear_format(t.layer, t.which, sparse ? t.format : nullptr);
  }
  installed_ = sparse;
}

void Sparse24Method::apply_masked_decay(TrainContext& ctx) const {
  FRUGAL_PROFILE("sparse24 masked decay");
  GPT& model = ctx.model();
  const float lambda = static_cast<float>(config_.decay);
  for (const Target& t : targets_) {
    const size_t offset = model.linear_weight_offset(t.layer, t.which);
    // Frozen (no gradient, no update) or held by another pipeline stage.
    if (offset == GPT::kAbsent || offset < model.trainable_begin()) continue;
    // The installed format's mask: this rank's part of the linear's under tensor parallelism.
    const std::span<const uint8_t> mask = dynamic_cast<const MaskedFormat&>(model.linear_format(t.layer, t.which)).mask();
    add_masked_decay(model.grads() + offset, model.params() + offset, mask.data(), mask.size(), lambda);
  }
}

void Sparse24Method::follow_reshape(TrainContext& ctx) {
  build_targets(ctx.model());
  installed_ = false;
  if (finetune_) return;
  compute_masks(ctx);
  install(ctx.session, true);
}

bool Sparse24Method::match(Event event, const TrainContext& ctx) const {
  switch (event) {
    case Event::Init:
    case Event::FitStart: return true;
    case Event::BatchStart: return installed_ && config_.mvue;
    case Event::BeforeOptimStep: return installed_ && config_.decay > 0;
    case Event::AfterOptimStep: return installed_;
    case Event::Reconfigure: return pending_ != Pending::None || ctx.reshaped;
    default: return false;
  }
}

void Sparse24Method::apply(Event event, TrainContext& ctx) {
  GPT& model = ctx.model();
  switch (event) {
    case Event::Init:
      build_targets(model);
      break;
    case Event::FitStart:  // after --init-from or a resume, the weights and state are final here
      finetune_ = finetune_ || ctx.step >= dense_start(ctx.max_steps);
      if (!finetune_) {
        if (!have_masks_) compute_masks(ctx);
        install(ctx.session, true);
      }
      break;
    case Event::BatchStart:
      for (size_t i = 0; i < targets_.size(); ++i) {
        const Target& t = targets_[i];
        if (!model.range().contains(t.layer)) continue;  // held by another pipeline stage
        // The installed format: under tensor parallelism this rank's part (LinearFormat::cut),
        // which draws the whole linear's numbers for its columns.
        dynamic_cast<Sparse24Format&>(model.linear_format(t.layer, t.which))
            .set_random_key(mix64(mix64(ctx.seed ^ 0x5A24u) + static_cast<uint64_t>(ctx.step) * targets_.size() + i));
      }
      break;
    case Event::BeforeOptimStep:
      apply_masked_decay(ctx);
      break;
    case Event::AfterOptimStep: {
      const int64_t next = ctx.step + 1;
      if (next == dense_start(ctx.max_steps) && next < ctx.max_steps)
        pending_ = Pending::GoDense;
      else if (next % config_.mask_interval == 0 && next < ctx.max_steps)
        pending_ = Pending::UpdateMasks;
      if (pending_ != Pending::None) ctx.request_reconfigure = true;
      break;
    }
    case Event::Reconfigure:
      if (ctx.reshaped) {
        follow_reshape(ctx);
        if (pending_ == Pending::UpdateMasks) pending_ = Pending::None;  // searched just now
      }
      if (pending_ == Pending::GoDense) {
        install(ctx.session, false);
        finetune_ = true;
      } else if (pending_ == Pending::UpdateMasks) {
        flip_rate_ = compute_masks(ctx);
        ++mask_updates_;
        for (Target& t : targets_) {
          t.format->set_mask(t.mask);
          if (model.range().contains(t.layer))  // the others refresh where they are installed
            t.format->refresh(model.params() + model.linear_weight_offset(t.layer, t.which), t.OC, t.IC);
        }
        if (ctx.metrics) (*ctx.metrics)["flip_rate"] = flip_rate_;
      }
      pending_ = Pending::None;
      break;
    default:
      break;
  }
}

nlohmann::json Sparse24Method::save_state() const {
  nlohmann::json masks = nlohmann::json::object();
  if (have_masks_)
    for (const Target& t : targets_) masks[linear_key(t.layer, t.which)] = encode_mask(t.mask);
  return {{"finetune", finetune_}, {"have_masks", have_masks_}, {"mask_updates", mask_updates_},
          {"flip_rate", flip_rate_}, {"masks", masks}};
}

void Sparse24Method::load_state(const nlohmann::json& s) {
  finetune_ = s.at("finetune");
  have_masks_ = s.at("have_masks");
  mask_updates_ = s.at("mask_updates");
  flip_rate_ = s.at("flip_rate");
  if (!have_masks_) return;
  const nlohmann::json& masks = s.at("masks");
  for (Target& t : targets_) {
    const std::string key = linear_key(t.layer, t.which);
    FRUGAL_CHECK(masks.contains(key), "the checkpoint has no sparse24 mask for {} (methods.sparse24."
                 "include_attention changed?); resume with the settings it was written with", key);
    decode_mask(masks.at(key).get<std::string>(), t.mask, "the checkpoint's sparse24 mask " + key);
  }
}

std::string Sparse24Method::restore_trained_function(TrainContext& ctx) {
  if (finetune_ || !have_masks_) return {};  // dense fine-tuning (or never sparse): dense weights
  install(ctx.session, true);
  return fmt::format("2:4 sparse weights of the sparse phase: the checkpoint's {} 2:4 masks on {} "
                     "linears", config_.transposable ? "transposable" : "row-wise", targets_.size());
}

}  // namespace frugal::sparse24
