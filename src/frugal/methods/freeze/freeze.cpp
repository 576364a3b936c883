// The freeze plugin; see freeze.h.
#include "frugal/methods/freeze/freeze.h"

#include <cmath>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"
#include "frugal/methods/freeze/schedule.h"

namespace frugal::freeze {

namespace {

void add_keys(io::ConfigSchema& s, const std::string& p) {
  using io::Range;
  s.add_int(p + ".frozen_layers", 0, "bottom blocks (and the embeddings) frozen for the whole run; with a tied head at most n_layer - 1", Range::at_least(0))
      .add_float(p + ".alpha", 0.0, "progressive schedule: ceil(L(1-(1-alpha)^T)) frozen after interval T; 0: off", Range::half_open(0, 1))
      .add_int(p + ".interval", 100, "steps per freeze interval", Range::at_least(1))
      .add_bool(p + ".adaptive", false, "also bound the schedule by the gradient-change criterion (min of both)")
      .add_int(p + ".max_frozen", -1, "most blocks ever frozen; -1: n_layer - 1; with a tied head at most n_layer - 1", Range::at_least(-1))
      .add_string(p + ".autocache", "auto", "cache the frozen prefix's output per sample: on only when "
                  "it pays (auto), always (on; needs model.dropout = 0 and a causal model) or never (off)", {"auto", "on", "off"})
      .add_int(p + ".cache_memory_mb", 2048, "AutoCache memory budget; entries beyond it spill to disk",
               Range::at_least(0))
      .add_string(p + ".cache_dir", "", "AutoCache spill directory; empty: <train.out_dir>/autocache");
}

std::unique_ptr<Method> make(const io::Config& c, const std::string& p) {
  FreezeConfig f;
  f.frozen_layers = c.get_int32(p + ".frozen_layers");
  f.alpha = c.get_float(p + ".alpha");
  f.interval = c.get_int32(p + ".interval");
  f.adaptive = c.get_bool(p + ".adaptive");
  f.max_frozen = c.get_int32(p + ".max_frozen");
  f.autocache.mode = parse_autocache_mode(c.get_string(p + ".autocache"));
  f.autocache.memory_mb = c.get_int(p + ".cache_memory_mb");
  f.autocache.dir = c.get_string(p + ".cache_dir");
  FRUGAL_CHECK(!f.adaptive || f.alpha > 0, "methods.freeze.adaptive needs methods.freeze.alpha > 0 "
               "(the adaptive criterion is bounded by the schedule)");
  const int n_layer = c.get_int32("model.n_layer");
  FRUGAL_CHECK(f.frozen_layers <= n_layer, "methods.freeze.frozen_layers = {} exceeds model.n_layer = {}",
               f.frozen_layers, n_layer);
  // Every block frozen with a tied head (the token embedding, frozen with the blocks) leaves
  // ln_f alone to train: refused, as it is never what a run means. An untied head still trains.
  if (c.get_bool("model.tied_head"))
    for (const auto& [key, blocks] : {std::pair{"frozen_layers", f.frozen_layers}, std::pair{"max_frozen", f.max_frozen}})
      FRUGAL_CHECK(blocks < n_layer, "{}.{} = {} would freeze every block (model.n_layer = {}) and, with "
                   "model.tied_head = true, the head, which is the frozen token embedding: only ln_f "
                   "would train; freeze at most {} blocks, or set model.tied_head = false to train the "
                   "head alone", p, key, blocks, n_layer, n_layer - 1);
  FRUGAL_CHECK(f.autocache.mode != AutoCacheMode::On || c.get_float("model.dropout") == 0,
               "methods.freeze.autocache = \"on\" needs model.dropout = 0 (with dropout the frozen "
               "blocks' output differs at every visit and cannot be cached); set model.dropout = 0 "
               "or methods.freeze.autocache = \"auto\"");
  FRUGAL_CHECK(f.autocache.mode != AutoCacheMode::On || c.get_string("model.objective") != "mlm",
               "methods.freeze.autocache = \"on\" cannot cache an encoder's frozen blocks (model.objective = "
               "\"mlm\" masks a sample anew at every visit, so their output changes); set "
               "methods.freeze.autocache = \"auto\" or \"off\"");
  return std::make_unique<FreezeMethod>(f);
}

}  // namespace

MethodInfo method_info() {
  return {"freeze", "progressive layer freezing (PipeTransformer) and fixed frozen prefixes", add_keys, make, {}};
}

std::vector<double> FreezeMethod::block_grad_squares(GPT& model) const {
  const int L = model.config().n_layer;
  const ShardCoord& shard = model.table().shard();
  const bool whole = shard.size == 1 && shard.expert_size == 1;
  const bool first = shard.rank == 0 && shard.expert_rank == 0;  // in its tensor and expert groups
  std::vector<double> squares(L, 0.0);
  for (int l = frozen_; l < L; ++l) {
    if (!model.range().contains(l)) continue;  // its pipeline stage adds it
    if (whole) {  // the whole block
      const auto [b, e] = model.table().layer_range(l);
      squares[l] = kernels::sum_squares(model.grads() + b, e - b);
      continue;
    }
    // A tensor or expert shard: its part of every split tensor; the tensors each rank holds whole,
    // once.
    for (const ParamInfo& t : model.table().entries())
      if (t.layer == l && (shard.group_of(t.placement).size > 1 || first))
        squares[l] += kernels::sum_squares(model.grads() + t.offset, t.numel);
  }
  return squares;
}

int FreezeMethod::cap(const GPT& model) const {
  const int L = model.config().n_layer;
  return config_.max_frozen < 0 ? L - 1 : std::min(config_.max_frozen, L);
}

void FreezeMethod::restart(TrainContext& ctx) {
  GPT& model = ctx.model();
  frozen_ = target_ = std::min(config_.frozen_layers, cap(model));
  intervals_done_ = 0;
  norm_sum_.clear();
  prev_norm_.clear();
  norm_samples_ = 0;
  model.set_frozen_prefix(frozen_);
  autocache_.drop();
  autocache_.update(ctx, frozen_, ctx.step + 1);
}

bool FreezeMethod::match(Event event, const TrainContext& ctx) const {
  switch (event) {
    case Event::Init:
    case Event::FitStart:
    case Event::Reconfigure:
      return true;
    case Event::AfterGradReduce:
      return config_.adaptive;
    case Event::BeforeForward:
    case Event::AfterForward:
      return autocache_.active();
    case Event::AfterOptimStep:
      return config_.alpha > 0 && (ctx.step + 1) % config_.interval == 0;
    case Event::BatchEnd:
      return ctx.metrics != nullptr || autocache_.active();
    default:
      return false;
  }
}

void FreezeMethod::apply(Event event, TrainContext& ctx) {
  GPT& model = ctx.model();
  const int L = model.config().n_layer;
  switch (event) {
    case Event::Init:
      frozen_ = target_ = config_.frozen_layers;
      model.set_frozen_prefix(frozen_);
      break;
    case Event::FitStart:  // after a resume, load_state() may have moved the boundary
      model.set_frozen_prefix(frozen_);
      autocache_.update(ctx, frozen_, ctx.step);
      break;
    case Event::BeforeForward:
      autocache_.serve(ctx, frozen_);
      break;
    case Event::AfterForward:
      autocache_.store(ctx, frozen_);
      break;
    case Event::AfterGradReduce: {  // accumulate per-block gradient norms over the interval
      std::vector<double> squares = block_grad_squares(model);
      if (ctx.sum_over_parts) ctx.sum_over_parts(squares);  // every rank gets every block's
      norm_sum_.resize(L, 0.0);
      for (int l = frozen_; l < L; ++l) norm_sum_[l] += std::sqrt(squares[l]);
      ++norm_samples_;
      break;
    }
    case Event::AfterOptimStep: {
      ++intervals_done_;
      int next = std::max(frozen_, frozen_by_schedule(L, config_.alpha, intervals_done_));
      if (config_.adaptive) {
        std::vector<double> norm(L, 0.0);
        for (int l = 0; l < L && norm_samples_ > 0; ++l) norm[l] = norm_sum_[l] / norm_samples_;
        next = std::min(next, frozen_by_gradient_change(prev_norm_, norm, frozen_));
        prev_norm_ = norm;
        norm_sum_.assign(L, 0.0);
        norm_samples_ = 0;
      }
      target_ = std::max(frozen_, std::min(next, cap(model)));
      if (target_ != frozen_) ctx.request_reconfigure = true;
      break;
    }
    case Event::Reconfigure:
      if (ctx.reshaped) {
        restart(ctx);
      } else if (target_ != frozen_) {
        frozen_ = target_;
        model.set_frozen_prefix(frozen_);
        autocache_.update(ctx, frozen_, ctx.step + 1);
      }
      break;
    case Event::BatchEnd:
      autocache_.end_step(ctx);
      if (!ctx.metrics) break;
      (*ctx.metrics)["frozen_layers"] = frozen_;
      // Adaptive: each block's mean gradient norm over the last interval, which the decision read.
      if (config_.adaptive && !prev_norm_.empty()) (*ctx.metrics)["freeze_block_grad_norm"] = prev_norm_;
      autocache_.add_metrics(*ctx.metrics);
      break;
    default:
      break;
  }
}

nlohmann::json FreezeMethod::save_state() const {
  return {{"frozen", frozen_}, {"intervals_done", intervals_done_}, {"norm_sum", norm_sum_},
          {"prev_norm", prev_norm_}, {"norm_samples", norm_samples_}};
}

void FreezeMethod::load_state(const nlohmann::json& s) {
  frozen_ = target_ = s.at("frozen");
  intervals_done_ = s.at("intervals_done");
  norm_sum_ = s.at("norm_sum").get<std::vector<double>>();
  prev_norm_ = s.at("prev_norm").get<std::vector<double>>();
  norm_samples_ = s.at("norm_samples");
}

}  // namespace frugal::freeze
