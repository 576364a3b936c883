// The mst plugin; see plugin.h.
#include "frugal/methods/mst/plugin.h"

#include <algorithm>

#include <fmt/format.h>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/core/rng.h"
#include "frugal/methods/mask_codec.h"
#include "frugal/methods/sparse24/plugin.h"

namespace frugal::mst {

namespace {

constexpr uint64_t kSeedSalt = 0x4D53542D4D41534Bull;  // "MST-MASK": this method's random streams

void add_keys(io::ConfigSchema& s, const std::string& p) {
  using io::Range;
  s.add_float(p + ".sparsity_initial", 0.0, "sparsity of the masked linears at step 0 (the warm-up starts here; 0: dense)", Range::closed(0, 0.99))
      .add_float(p + ".sparsity_peak", 0.9, "sparsity of the ultra-sparse hold, reached by the end of the warm-up", Range::closed(0, 0.99))
      .add_float(p + ".sparsity_final", 0.5, "sparsity of the block linears when the run ends (after its last step), where the restoration phase ends", Range::closed(0, 0.99))
      .add_float(p + ".warmup_fraction", 0.15, "end of the sparsity warm-up, as a fraction of train.max_steps", Range::closed(0, 1))
      .add_float(p + ".restore_fraction", 0.8, "start of the restoration phase, as a fraction of train.max_steps", Range::closed(0, 1))
      .add_bool(p + ".dynamic", true, "drop and grow weights every update_interval steps; false: the initial mask all run (static sparse)")
      .add_int(p + ".update_interval", 100, "steps between topology updates (Delta)", Range::at_least(1))
      .add_float(p + ".drop_fraction", 0.3, "zeta: fraction of active weights dropped at step 0, decayed by a cosine to 0 at the last step", Range::closed(0, 1))
      .add_float(p + ".random_growth", 0.25, "share of the grown weights chosen at random instead of by |gradient| (Mixed-Growing)", Range::closed(0, 1))
      .add_string(p + ".distribution", "erdos_renyi", "per-linear densities: erdos_renyi (density ~ (OC+IC)/(OC*IC)) or uniform")
      .add_string(p + ".attention", "strided", "attention during the ultra-sparse hold: strided (window + every stride-th key), fixed (blocks + summary columns) or dense (causal)")
      .add_int(p + ".attention_window", 16, "strided: keys i-window < j <= i; below model.block_size", Range::at_least(1))
      .add_int(p + ".attention_stride", 16, "strided: also keys with (i - j) % stride == 0; below model.block_size", Range::at_least(1))
      .add_int(p + ".attention_block", 16, "fixed: keys of the query's own block of this many positions; below model.block_size", Range::at_least(1))
      .add_int(p + ".attention_summary", 1, "fixed: also the last this-many positions of every earlier block", Range::at_least(0));
}

std::unique_ptr<Method> make(const io::Config& c, const std::string& p) {
  MstConfig m;
  m.schedule.initial = c.get_float(p + ".sparsity_initial");
  m.schedule.peak = c.get_float(p + ".sparsity_peak");
  m.schedule.final = c.get_float(p + ".sparsity_final");
  m.schedule.warmup_fraction = c.get_float(p + ".warmup_fraction");
  m.schedule.restore_fraction = c.get_float(p + ".restore_fraction");
  FRUGAL_CHECK(m.schedule.warmup_fraction <= m.schedule.restore_fraction,
               "{0}.warmup_fraction ({1}) is after {0}.restore_fraction ({2}); the hold runs between "
               "them: make warmup_fraction <= restore_fraction", p, m.schedule.warmup_fraction,
               m.schedule.restore_fraction);
  m.dynamic = c.get_bool(p + ".dynamic");
  FRUGAL_CHECK(m.dynamic || (m.schedule.initial == m.schedule.peak && m.schedule.peak == m.schedule.final),
               "{0}.dynamic = false keeps one mask all run, so the sparsity cannot vary: set "
               "{0}.sparsity_initial, sparsity_peak and sparsity_final to the same value", p);
  m.update_interval = c.get_int32(p + ".update_interval");
  m.drop_fraction = c.get_float(p + ".drop_fraction");
  m.random_growth = c.get_float(p + ".random_growth");
  const std::string& distribution = c.get_string(p + ".distribution");
  FRUGAL_CHECK(distribution == "erdos_renyi" || distribution == "uniform",
               "{}.distribution is '{}'; use erdos_renyi or uniform", p, distribution);
  m.erdos_renyi = distribution == "erdos_renyi";
  const std::string& attention = c.get_string(p + ".attention");
  if (c.get_string("model.objective") == "mlm") m.dense_attention = kernels::AttentionPattern::bidirectional();
  // A length of the pattern at or past model.block_size does not do what its key says.
  const int block_size = c.get_int32("model.block_size");
  const auto length = [&](const char* key, const char* effect) {
    const int value = c.get_int32(p + "." + key);
    FRUGAL_CHECK(value < block_size, "{0}.{1} = {2} is not below model.block_size = {3}: {4}; make it "
                 "smaller than {3}, or set {0}.attention = \"dense\"", p, key, value, block_size, effect);
    return value;
  };
  if (attention == "strided")
    m.attention = kernels::AttentionPattern::strided(
        length("attention_window", "the window alone would hold every earlier key (dense attention)"),
        length("attention_stride", "no earlier key would be a whole stride away (the window only)"));
  else if (attention == "fixed")
    m.attention = kernels::AttentionPattern::fixed(
        length("attention_block", "one block would hold every earlier key (dense attention)"),
        c.get_int32(p + ".attention_summary"));
  else if (attention == "dense")
    m.attention = m.dense_attention;
  else
    fail("{}.attention is '{}'; use strided, fixed or dense", p, attention);
  // The sparse patterns are causal ones; an encoder keeps its own attention throughout.
  FRUGAL_CHECK(attention == "dense" || c.get_string("model.objective") != "mlm",
               "{0}.attention = \"{1}\" is a causal sparse pattern and an encoder (model.objective = "
               "\"mlm\") attends both ways; set {0}.attention = \"dense\" (the sparse weights still "
               "apply)", p, attention);
  // Beside 2:4, each linear has one owner: 2:4 keeps its linears (the FFN's), mst takes the rest.
  if (c.section_present("methods.sparse24")) {
    const bool attention24 = c.get_bool("methods.sparse24.include_attention");
    FRUGAL_CHECK(!attention24, "methods.sparse24.include_attention = true gives every block linear to 2:4, "
                 "leaving {} none to mask; set it to false (2:4 on the FFN, mst on the attention "
                 "projections) or remove one of the two tables", p);
    m.left_to_others = sparse24::masked_linears(attention24);
  }
  return std::make_unique<MstMethod>(m);
}

// Zeroes AdamW's m and v of the parameter at flat offset off, if this process's shard holds them.
void zero_moments(AdamW& optim, size_t off) {
  if (off < optim.shard_begin() || off >= optim.shard_end()) return;
  optim.m()[off - optim.shard_begin()] = 0;
  optim.v()[off - optim.shard_begin()] = 0;
}

}  // namespace

MethodInfo method_info() {
  return {"mst",
          "Mixed Sparsity Training: dynamic sparse block linears (Erdos-Renyi, drop/grow), sparsity "
          "warm-up/hold/restoration, hybrid sparse attention in the hold",
          add_keys,
          make,
          {}};
}

bool MstMethod::is_update_step(int64_t step, int64_t max_steps) const {
  return config_.dynamic && step > 0 && step % config_.update_interval == 0 && step + 1 < max_steps;
}

int64_t MstMethod::target_step(int64_t step, int64_t max_steps) const {
  const int64_t next = (step / config_.update_interval + 1) * config_.update_interval;
  return is_update_step(next, max_steps) ? next + 1 : max_steps;
}

kernels::AttentionPattern MstMethod::pattern_at(int64_t step, int64_t max_steps) const {
  return config_.schedule.in_hold(step, max_steps) ? config_.attention : config_.dense_attention;
}

double MstMethod::sparsity() const {
  int64_t active = 0, total = 0;
  for (const Target& t : targets_) active += t.active, total += t.size();
  return total == 0 ? 0.0 : 1.0 - static_cast<double>(active) / static_cast<double>(total);
}

std::vector<double> MstMethod::densities_at(int64_t step, int64_t max_steps) const {
  std::vector<std::pair<int, int>> shapes;
  for (const Target& t : targets_) shapes.emplace_back(t.OC, t.IC);
  return layer_densities(shapes, 1 - config_.schedule.at(step, max_steps), !config_.erdos_renyi);
}

void MstMethod::set_attention(Session& session, int64_t step, int64_t max_steps) const {
  for (int l = 0; l < session.model().config().n_layer; ++l) session.set_attention_pattern(l, pattern_at(step, max_steps));
}

std::vector<BlockMask> MstMethod::block_masks() {
  std::vector<BlockMask> masks;
  for (Target& t : targets_) masks.push_back({t.layer, &t.mask});
  return masks;
}

void MstMethod::build_targets(const GPT& model) {
  targets_.clear();
  for (int l = 0; l < model.config().n_layer; ++l)
    for (int w = 0; w < GPT::kLinears; ++w) {
      const auto which = static_cast<GPT::Linear>(w);
      if (model.linear_weight_offset(l, which) == GPT::kAbsent ||
          std::ranges::find(config_.left_to_others, which) != config_.left_to_others.end())
        continue;
      Target t;
      t.layer = l;
      t.which = which;
      std::tie(t.OC, t.IC) = model.linear_shape(which);
      targets_.push_back(std::move(t));
    }
}

void MstMethod::follow_reshape(TrainContext& ctx) {
  GPT& model = ctx.model();
  build_targets(model);
  const std::vector<double> density = densities_at(target_step(ctx.step, ctx.max_steps), ctx.max_steps);
  for (size_t k = 0; k < targets_.size(); ++k) {
    Target& t = targets_[k];
    t.active = active_count(density[k], t.size());
    t.mask.assign(static_cast<size_t>(t.size()), 0);
    if (model.range().contains(t.layer))  // else its pipeline stage chooses it
      t.mask = magnitude_mask({model.params() + model.linear_weight_offset(t.layer, t.which), static_cast<size_t>(t.size())}, t.active);
  }
  share_masks(ctx, block_masks());
  apply_masks_to_state(ctx);
  pending_install_ = true;
}

void MstMethod::initial_masks(uint64_t seed, int64_t max_steps) {
  const std::vector<double> density = densities_at(0, max_steps);
  for (size_t k = 0; k < targets_.size(); ++k) {
    Target& t = targets_[k];
    t.active = active_count(density[k], t.size());
    t.mask = random_mask(t.size(), t.active, mix64(seed ^ kSeedSalt), k);
  }
  have_masks_ = true;
}

void MstMethod::apply_masks_to_state(TrainContext& ctx, bool weights_only) const {
  GPT& model = ctx.model();
  AdamW& optim = ctx.optim();
  const bool moments = !weights_only && optim.steps_taken() > 0;  // else unallocated or zero
  for (const Target& t : targets_) {
    const size_t off = model.linear_weight_offset(t.layer, t.which);
    if (off == GPT::kAbsent || t.active == t.size()) continue;  // held by another pipeline stage, or full
    for (int64_t i = 0; i < t.size(); ++i) {
      if (t.mask[i]) continue;
      model.params()[off + i] = 0;
      if (moments) zero_moments(optim, off + i);
    }
  }
}

void MstMethod::update_topology(TrainContext& ctx) {
  FRUGAL_PROFILE("mst topology update");
  GPT& model = ctx.model();
  AdamW& optim = ctx.optim();
  const std::vector<double> density = densities_at(target_step(ctx.step, ctx.max_steps), ctx.max_steps);
  const double zeta = drop_fraction(config_.drop_fraction, ctx.step, ctx.max_steps);
  const uint64_t key = mix64(ctx.seed ^ kSeedSalt) + static_cast<uint64_t>(ctx.step);
  last_pruned_ = last_grown_ = 0;
  for (size_t k = 0; k < targets_.size(); ++k) {
    Target& t = targets_[k];
    if (t.layer < model.frozen_prefix()) continue;  // frozen: no gradient, its mask stays
    const UpdateCounts counts = update_counts(t.size(), t.active, active_count(density[k], t.size()), zeta);
    const size_t off = model.linear_weight_offset(t.layer, t.which);
    if (off != GPT::kAbsent) {  // else its pipeline stage drops and grows, from its gradients
      const UpdateResult r = drop_and_grow(t.mask, {model.params() + off, static_cast<size_t>(t.size())},
                                           {model.grads() + off, static_cast<size_t>(t.size())}, counts,
                                           config_.random_growth, key, k);
      for (int64_t i : r.dropped) model.params()[off + i] = 0;
      for (const std::vector<int64_t>* changed : {&r.dropped, &r.grown})
        for (int64_t i : *changed) zero_moments(optim, off + i);  // grown weights are 0 already
    }
    t.active += counts.grow - counts.prune;
    last_pruned_ += counts.prune;
    last_grown_ += counts.grow;
  }
  share_masks(ctx, block_masks());
  ++updates_;
  pending_install_ = true;
}

void MstMethod::mask_gradients(TrainContext& ctx) const {
  FRUGAL_PROFILE("mst gradient mask");
  GPT& model = ctx.model();
  for (const Target& t : targets_) {
    const size_t off = model.linear_weight_offset(t.layer, t.which);
    if (off == GPT::kAbsent || off < model.trainable_begin() || t.active == t.size()) continue;
    float* g = model.grads() + off;
    const uint8_t* m = t.mask.data();
    for (int64_t i = 0; i < t.size(); ++i) g[i] = m[i] ? g[i] : 0.0f;
  }
}

void MstMethod::install_formats(Session& session) {
  const GPT& model = session.model();
  for (Target& t : targets_) {
    if (t.active == t.size()) {  // full: the dense format
      if (t.format) session.set_linear_format(t.layer, t.which, nullptr);
      t.format.reset();
    } else if (!t.format) {
      t.format = std::make_shared<SparseFormat>(t.OC, t.IC, t.mask);
      session.set_linear_format(t.layer, t.which, t.format);
    } else {
      t.format->set_mask(t.mask);
      if (model.range().contains(t.layer))  // the others refresh where they are installed
        t.format->refresh(model.params() + model.linear_weight_offset(t.layer, t.which), t.OC, t.IC);
    }
  }
}

bool MstMethod::match(Event event, const TrainContext& ctx) const {
  switch (event) {
    case Event::Init:
    case Event::FitStart:
    case Event::BatchStart:
    case Event::AfterOptimStep:
    case Event::BatchEnd: return true;
    case Event::AfterGradReduce: return is_update_step(ctx.step, ctx.max_steps);
    case Event::Reconfigure:  // none after the last step: the model keeps the pattern it ended with
      return pending_install_ || ctx.reshaped || (ctx.step + 1 < ctx.max_steps &&
                                  pattern_at(ctx.step + 1, ctx.max_steps) != pattern_at(ctx.step, ctx.max_steps));
    default: return false;
  }
}

void MstMethod::apply(Event event, TrainContext& ctx) {
  GPT& model = ctx.model();
  switch (event) {
    case Event::Init:
      build_targets(model);
      break;
    case Event::FitStart:  // after --init-from or a resume, the weights and state are final here
      if (!have_masks_) initial_masks(ctx.seed, ctx.max_steps);
      apply_masks_to_state(ctx);
      install_formats(ctx.session);
      set_attention(ctx.session, ctx.step, ctx.max_steps);
      break;
    case Event::BatchStart: {  // growth reads the dense gradient of an update step
      const bool dense = is_update_step(ctx.step, ctx.max_steps);
      for (Target& t : targets_) {
        if (!t.format) continue;
        t.format->set_dense_weight_grad(dense);
        // Under tensor parallelism the model runs this rank's part of the format (LinearFormat::cut).
        if (model.range().contains(t.layer))
          if (auto* part = dynamic_cast<SparseFormat*>(&model.linear_format(t.layer, t.which))) part->set_dense_weight_grad(dense);
      }
      break;
    }
    case Event::AfterGradReduce:
      // SparseFormat's weight gradient changes only the kept entries, except on an update step,
      // whose dense gradient the topology update reads and then masks.
      if (is_update_step(ctx.step, ctx.max_steps)) {
        update_topology(ctx);
        mask_gradients(ctx);
      }
      break;
    case Event::AfterOptimStep:
      // Muon's orthogonalised update is dense: it moved the weights outside the masks too.
      if (ctx.optim().config().muon.enabled) apply_masks_to_state(ctx, /*weights_only=*/true);
      if (match(Event::Reconfigure, ctx)) ctx.request_reconfigure = true;
      break;
    case Event::Reconfigure:
      if (ctx.reshaped) follow_reshape(ctx);
      if (pending_install_) install_formats(ctx.session);
      pending_install_ = false;
      set_attention(ctx.session, ctx.step + 1, ctx.max_steps);
      break;
    case Event::BatchEnd:
      if (!ctx.metrics) break;
      (*ctx.metrics)["sparsity"] = sparsity();
      if (is_update_step(ctx.step, ctx.max_steps)) {
        (*ctx.metrics)["mst_pruned"] = last_pruned_;
        (*ctx.metrics)["mst_grown"] = last_grown_;
      }
      break;
    default:
      break;
  }
}

nlohmann::json MstMethod::save_state() const {
  nlohmann::json masks = nlohmann::json::object();
  if (have_masks_)
    for (const Target& t : targets_) masks[linear_key(t.layer, t.which)] = encode_mask(t.mask);
  return {{"have_masks", have_masks_}, {"topology_updates", updates_}, {"masks", masks}};
}

void MstMethod::load_state(const nlohmann::json& s) {
  have_masks_ = s.at("have_masks");
  updates_ = s.at("topology_updates");
  if (!have_masks_) return;
  const nlohmann::json& masks = s.at("masks");
  for (Target& t : targets_) {
    const std::string key = linear_key(t.layer, t.which);
    FRUGAL_CHECK(masks.contains(key), "the checkpoint has no mst mask for linear {}; resume with the "
                 "model config it was written with", key);
    t.mask.assign(static_cast<size_t>(t.size()), 0);
    decode_mask(masks.at(key).get<std::string>(), t.mask, "the checkpoint's mst mask " + key);
    t.active = std::count(t.mask.begin(), t.mask.end(), uint8_t{1});
  }
}

std::string MstMethod::restore_trained_function(TrainContext& ctx) {
  if (!have_masks_) return {};
  install_formats(ctx.session);
  // No Reconfigure follows the last step: a final checkpoint keeps the last step's pattern.
  const int64_t step = std::min(ctx.step, ctx.max_steps - 1);
  set_attention(ctx.session, step, ctx.max_steps);
  const kernels::AttentionPattern pattern = pattern_at(step, ctx.max_steps);
  return fmt::format("sparse block linears at sparsity {:.3f} (the checkpoint's masks){}", sparsity(),
                     pattern == config_.dense_attention ? std::string()
                     : fmt::format("; {} attention in every block (the ultra-sparse hold)", pattern.name()));
}

}  // namespace frugal::mst
