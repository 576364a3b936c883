// The multilevel (V-cycle) plugin; see vcycle.h.
#include "frugal/methods/multilevel/vcycle.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "frugal/core/error.h"

namespace frugal::multilevel {

namespace {

constexpr const char* kPrefix = "methods.multilevel";

void add_keys(io::ConfigSchema& s, const std::string& p) {
  using io::Range;
  s.add_int(p + ".levels", 2, "levels of the V-cycle, the configured model being level 1", Range::at_least(2))
      .add_strings(p + ".shares", {}, "share of the run's steps of each of the 2·levels-1 segments "
                   "(levels 1, 2, ..., k, ..., 2, 1), summing to 1; empty: the released schedule "
                   "0.05, 0.5, 0.45 (two levels only)")
      .add_strings(p + ".lr_factors", {}, "learning-rate factor of each level (level 1 first) on the "
                   "run's schedule; empty: 1 for level 1, 4 for every smaller level")
      .add_strings(p + ".alpha", {"0.5"}, "interpolation weight of the de-coalesced model on the way "
                   "up, per transition (one value: every transition); 0 keeps the saved model")
      .add_strings(p + ".width_factor", {"2"}, "heads of a level per head of the next, per transition "
                   "(one value: every transition); must divide the level's heads; 1 keeps the width")
      .add_strings(p + ".depth_factor", {"2"}, "layers of a level per layer of the next (rounded up), "
                   "per transition (one value: every transition); 1 keeps the depth")
      .add_string(p + ".width_grouping", "stride", "which heads are merged: stride (head h with "
                  "h + H/2, the paper's) or adjacent (2h, 2h+1)", {"stride", "adjacent"})
      .add_string(p + ".depth_grouping", "adjacent", "which layers are merged: adjacent (2i, 2i+1, "
                  "the paper's) or stride (i, i + L/2)", {"adjacent", "stride"})
      .add_string(p + ".lr_schedule", "segment", "the learning rate over the cycle: segment (the run's "
                  "warm-up in the first segment, then in each later segment the run's schedule (cosine or wsd) "
                  "from optim.lr to optim.min_lr over its own steps, as the released code's separate runs "
                  "do) or run (the run's warm-up and schedule throughout)", {"segment", "run"})
      .add_string(p + ".moments", "fresh", "the optimizer's state after a level change (AdamW's m and v, "
                  "Muon's momentum): fresh (zero, bias correction restarted) or mapped (through the operator "
                  "that maps the weights)",
                  {"fresh", "mapped"});
}

// The numbers of list key `name`: `count` of them (one value stands for all); `fallback` when empty.
std::vector<double> numbers(const io::Config& c, const std::string& name, size_t count,
                            std::vector<double> fallback, const std::string& what) {
  const std::string key = std::string(kPrefix) + "." + name;
  const std::vector<std::string>& text = c.get_strings(key);
  if (text.empty()) return fallback;
  std::vector<double> out;
  for (const std::string& t : text) {
    size_t used = 0;
    double x = NAN;
    try {
      x = std::stod(t, &used);
    } catch (const std::exception&) {
    }
    FRUGAL_CHECK(used == t.size() && std::isfinite(x), "{} = \"{}\" is not a number", key, t);
    out.push_back(x);
  }
  if (out.size() == 1 && count > 1) out.assign(count, out[0]);
  FRUGAL_CHECK(out.size() == count, "{} has {} values; a V-cycle of {} levels needs {} ({})", key,
               out.size(), c.get_int32(std::string(kPrefix) + ".levels"), count, what);
  return out;
}

std::unique_ptr<Method> make(const io::Config& c, const std::string& p) {
  VCycleConfig v;
  v.levels = c.get_int32(p + ".levels");
  const size_t k = static_cast<size_t>(v.levels), segments = 2 * k - 1;
  std::vector<double> released;
  if (k == 2) released = {0.05, 0.5, 0.45};
  FRUGAL_CHECK(k == 2 || !c.get_strings(p + ".shares").empty(), "{}.shares is required for {} levels "
               "(the released schedule is for two): give {} shares, e.g. 0.05,0.1,0.4,0.1,0.35 for three",
               p, k, segments);
  v.shares = numbers(c, "shares", segments, released, "levels 1..k down, then k-1..1 up");
  std::vector<double> lr(k, 4.0);
  lr[0] = 1.0;
  v.lr_factors = numbers(c, "lr_factors", k, lr, "one per level");
  v.alphas = numbers(c, "alpha", k - 1, {}, "one per transition");
  const std::vector<double> widths = numbers(c, "width_factor", k - 1, {}, "one per transition");
  const std::vector<double> depths = numbers(c, "depth_factor", k - 1, {}, "one per transition");
  const std::string moments = c.get_string(p + ".moments");
  v.moments = moments == "fresh" ? MomentRule::Fresh : MomentRule::Mapped;
  v.lr_shape = c.get_string(p + ".lr_schedule") == "segment" ? LrShape::Segment : LrShape::Run;

  for (double s : v.shares) FRUGAL_CHECK(s >= 0, "{}.shares holds {}; shares cannot be negative", p, s);
  const double sum = std::accumulate(v.shares.begin(), v.shares.end(), 0.0);
  FRUGAL_CHECK(std::abs(sum - 1.0) < 1e-6, "{}.shares sum to {}; they must sum to 1", p, sum);
  for (double f : v.lr_factors) FRUGAL_CHECK(f > 0, "{}.lr_factors holds {}; factors must be positive", p, f);
  for (double a : v.alphas) FRUGAL_CHECK(a >= 0 && a <= 1, "{}.alpha holds {}; it must be in [0, 1]", p, a);
  for (size_t i = 0; i + 1 < k; ++i) {
    for (auto [name, x] : {std::pair{"width_factor", widths[i]}, std::pair{"depth_factor", depths[i]}})
      FRUGAL_CHECK(x == std::floor(x) && x >= 1, "{}.{} holds {}; factors are whole numbers >= 1", p, name, x);
    CoalesceSpec spec;
    spec.width_factor = static_cast<int>(widths[i]);
    spec.depth_factor = static_cast<int>(depths[i]);
    spec.width = parse_grouping(c.get_string(p + ".width_grouping"), p + ".width_grouping");
    spec.depth = parse_grouping(c.get_string(p + ".depth_grouping"), p + ".depth_grouping");
    v.specs.push_back(spec);
  }
  // The chain of levels must fit the configured model (the vocabulary does not matter).
  ModelConfig model;
  model.n_layer = c.get_int32("model.n_layer");
  model.n_head = c.get_int32("model.n_head");
  model.n_embd = c.get_int32("model.n_embd");
  model.ffn_mult = c.get_int32("model.ffn_mult");
  v.fewest_blocks = model.n_layer;
  const int tensor = c.get_int32("parallel.tensor");
  for (const LevelMap& map : level_maps(model, v.specs)) {
    v.fewest_blocks = std::min(v.fewest_blocks, map.small.n_layer);
    // Every level is split over the tensor-parallel ranks by heads and hidden units.
    FRUGAL_CHECK(map.small.n_head % tensor == 0 && map.small.ffn_hidden() % tensor == 0, "{}: a level of {} "
                 "heads and {} hidden units does not split over parallel.tensor = {} ranks; set parallel.tensor "
                 "to a divisor of every level's heads, or a width_factor that keeps them", kPrefix,
                 map.small.n_head, map.small.ffn_hidden(), tensor);
  }
  return std::make_unique<VCycleMethod>(std::move(v), c.get_int("train.max_steps"));
}

}  // namespace

std::vector<LevelMap> level_maps(const ModelConfig& level1, const std::vector<CoalesceSpec>& specs) {
  std::vector<LevelMap> maps;
  ModelConfig large = level1;
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      maps.push_back(LevelMap::make(large, specs[i]));
    } catch (const Error& e) {
      fail("{}: transition {} (level {} with {} layers, {} heads -> level {}): {}", kPrefix, i + 1, i + 1,
           large.n_layer, large.n_head, i + 2, e.what());
    }
    large = maps.back().small;
  }
  return maps;
}

MethodInfo method_info() {
  return {"multilevel", "multi-level training: the V-cycle of coalescing, de-coalescing and interpolation",
          add_keys, make, {}};
}

std::vector<int64_t> VCycleMethod::segment_ends(const std::vector<double>& shares, int64_t max_steps) {
  std::vector<int64_t> ends;
  double cumulative = 0;
  for (size_t s = 0; s + 1 < shares.size(); ++s) {
    cumulative += shares[s];
    ends.push_back(std::llround(cumulative * static_cast<double>(max_steps)));
  }
  ends.push_back(max_steps);
  return ends;
}

VCycleMethod::VCycleMethod(VCycleConfig config, int64_t max_steps)
    : config_(std::move(config)), stats_(config_.levels) {
  plan_segments(max_steps, "train.max_steps");
}

void VCycleMethod::plan_segments(int64_t horizon, std::string_view horizon_key) {
  ends_ = segment_ends(config_.shares, horizon);
  horizon_ = horizon;
  if (horizon_key.empty()) return;
  FRUGAL_CHECK(ends_.front() >= 1 && ends_[ends_.size() - 2] < horizon, "{}.shares give level 1 "
               "{} steps at the start and {} at the end of a run of {} steps; both need at least one "
               "(raise their shares or {})", kPrefix, ends_.front(), horizon - ends_[ends_.size() - 2],
               horizon, horizon_key);
}

void VCycleMethod::follow_horizon(TrainContext& ctx) {
  // A time budget's horizon is checked when it is first fixed, during the first segment; a later
  // one (fixed again from the coarse levels' timed steps) is followed as it is.
  plan_segments(ctx.max_steps, segment_ == 0 ? "train.max_seconds" : "");
  if (config_.lr_shape == LrShape::Segment) {  // a schedule is not saved: installed at every start
    const AdamWConfig optim = ctx.optim().config();
    ctx.session.set_lr_schedule([optim, ends = ends_, max_steps = ctx.max_steps](int64_t step) {
      const size_t s = std::upper_bound(ends.begin(), ends.end(), step) - ends.begin();
      if (s == 0) return lr_at(optim, step, max_steps);
      if (s == ends.size()) return optim.min_lr;  // past the run's end
      AdamWConfig restarted = optim;
      restarted.warmup_steps = 0;
      return lr_at(restarted, step - ends[s - 1], ends[s] - ends[s - 1]);
    });
  }
}

double VCycleMethod::relative_cost(int level) const {
  // Per token, a linear costs 6 FLOPs per weight and a block's attention 6·C·T (forward and
  // backward); the embeddings count as the tied head.
  const auto cost = [&](const ModelConfig& c) {
    return static_cast<double>(ParamTable::build(c).total()) + double(c.n_layer) * c.n_embd * seq_len_;
  };
  return cost(level_config(level)) / cost(level_config(0));
}

std::optional<StepPlan> VCycleMethod::step_plan(int64_t horizon) const {
  StepPlan plan;
  plan.ends = segment_ends(config_.shares, horizon);
  for (int s = 0; s <= last_segment(); ++s) plan.kinds.push_back(level_of(s));
  for (int level = 0; level < config_.levels; ++level) {
    plan.estimated_cost.push_back(relative_cost(level));
    plan.names.push_back(fmt::format("level {}", level + 1));
  }
  return plan;
}

int VCycleMethod::level_of(int segment) const {
  return segment < config_.levels ? segment : last_segment() - segment;
}

const ModelConfig& VCycleMethod::level_config(int level) const {
  return level == 0 ? maps_.front().large : maps_[level - 1].small;
}

bool VCycleMethod::match(Event event, const TrainContext& ctx) const {
  switch (event) {
    case Event::FitStart:
    case Event::BatchStart:
    case Event::BatchEnd:
      return true;
    case Event::AfterOptimStep:
    case Event::Reconfigure:  // a segment ends: the next step runs another level
      return segment_ < last_segment() && ctx.step + 1 >= ends_[segment_];
    default:
      return false;
  }
}

void VCycleMethod::apply(Event event, TrainContext& ctx) {
  switch (event) {
    case Event::FitStart:  // after a resume, load_state() gave the segment and level 0's shape
      restore_levels(ctx.model().config());
      seq_len_ = ctx.seq_len;
      follow_horizon(ctx);
      break;
    case Event::BatchStart:
      if (ctx.max_steps != horizon_) follow_horizon(ctx);  // a time budget fixed its horizon
      step_level_ = level();
      step_timer_.reset();
      break;
    case Event::AfterOptimStep:
      ctx.request_reconfigure = true;
      break;
    case Event::Reconfigure:
      while (segment_ < last_segment() && ctx.step + 1 >= ends_[segment_]) advance(ctx);
      break;
    case Event::BatchEnd: {
      LevelStats& s = stats_[step_level_];
      ++s.steps;
      s.seconds += step_timer_.seconds();
      s.flops += ctx.step_flops;
      if (!ctx.metrics) break;
      nlohmann::json& m = *ctx.metrics;
      m["level"] = step_level_ + 1;
      for (int i = 0; i < config_.levels; ++i) {
        m[fmt::format("level{}_steps", i + 1)] = stats_[i].steps;
        m[fmt::format("level{}_seconds", i + 1)] = stats_[i].seconds;
        m[fmt::format("level{}_flops", i + 1)] = stats_[i].flops;
      }
      break;
    }
    default:
      break;
  }
}

void VCycleMethod::restore_levels(const ModelConfig& model) {
  ModelConfig level0 = model;
  if (level0_layers_ == 0) {
    level0_layers_ = level0.n_layer;
    level0_heads_ = level0.n_head;
    level0_embd_ = level0.n_embd;
  }
  level0.n_layer = level0_layers_;
  level0.n_head = level0_heads_;
  level0.n_embd = level0_embd_;
  maps_ = level_maps(level0, config_.specs);
  FRUGAL_CHECK(static_cast<int>(kept_.size()) == level(), "{}: the checkpoint is at level {} of its "
               "V-cycle but holds the kept weights of {} of the {} levels above it: its "
               "methods.safetensors is missing or incomplete; copy that file back into the "
               "checkpoint directory, or use an earlier checkpoint of the run", kPrefix, level() + 1,
               kept_.size(), level());
  FRUGAL_CHECK(model == level_config(level()), "{}: the model ({} layers, {} heads, width {}) is not "
               "level {} of this V-cycle; resume the run with its own config", kPrefix, model.n_layer,
               model.n_head, model.n_embd, level() + 1);
  for (int i = 0; i < level(); ++i) {
    FRUGAL_CHECK(kept_[i].size() == ParamTable::build(level_config(i)).total(), "{}: the checkpoint's kept "
                 "weights of level {} do not fit that level's shape; the checkpoint is damaged",
                 kPrefix, i + 1);
  }
}

std::string VCycleMethod::restore_trained_function(TrainContext& ctx) {
  restore_levels(ctx.model().config());
  if (level() == 0) return {};  // the configured model
  const ModelConfig &small = level_config(level()), &large = level_config(0);
  return fmt::format("level {} of the {}-level V-cycle: the coalesced model ({} layers, {} heads, "
                     "n_embd {}) that the run was training at this step, not the configured model "
                     "({} layers, {} heads, n_embd {})", level() + 1, config_.levels, small.n_layer,
                     small.n_head, small.n_embd, large.n_layer, large.n_head, large.n_embd);
}

std::string VCycleMethod::unfinished_at_end() const {
  if (level() == 0) return {};
  const ModelConfig &small = level_config(level()), &large = level_config(0);
  return fmt::format("the run ended on level {} of its {}-level V-cycle, before the cycle returned to level 1 (a "
                     "time limit ran out on the coarse level): the checkpoint holds the coarse model ({} layers, {} "
                     "heads, n_embd {}), not the configured one ({} layers, {} heads, n_embd {}), and eval, sample "
                     "and export compute it as trained; to end on the configured model, give the run more time "
                     "(train.max_seconds) or the coarse levels smaller shares ({}.shares)", level() + 1,
                     config_.levels, small.n_layer, small.n_head, small.n_embd, large.n_layer, large.n_head,
                     large.n_embd, kPrefix);
}

void VCycleMethod::advance(TrainContext& ctx) {
  const int from = level_of(segment_), to = level_of(segment_ + 1);
  const bool mapped = config_.moments == MomentRule::Mapped;
  Session& session = ctx.session;
  if (to > from) {  // down: keep this level's weights, coalesce
    const LevelMap& map = maps_[from];
    const GPT& model = session.model();
    kept_.emplace_back(model.params(), model.params() + model.num_floats());
    session.reshape(map.small, [&](const NamedTensors& large, const NamedTensors& small) {
      coalesce(map, large.params(), small.params());
      if (mapped) {
        coalesce(map, large.m(), small.m());
        coalesce(map, large.v(), small.v());
      }
    });
  } else {  // up: de-coalesce, interpolate with the kept weights
    const LevelMap& map = maps_[to];
    const std::vector<float> kept = std::move(kept_.back());
    kept_.pop_back();
    session.reshape(map.large, [&](const NamedTensors& small, const NamedTensors& large) {
      decoalesce(map, small.params(), large.params());
      interpolate(static_cast<float>(config_.alphas[to]), kept, large.params());
      if (mapped) {
        decoalesce(map, small.m(), large.m());
        decoalesce(map, small.v(), large.v());
      }
    });
  }
  if (!mapped) session.optim().set_steps_taken(0);
  session.scale_lr(config_.lr_factors[to] / config_.lr_factors[from]);
  ++segment_;
}

nlohmann::json VCycleMethod::save_state() const {
  nlohmann::json stats = nlohmann::json::array();
  for (const LevelStats& s : stats_) stats.push_back({s.steps, s.seconds, s.flops});
  return {{"segment", segment_},
          {"level0", {level0_layers_, level0_heads_, level0_embd_}},
          {"stats", stats}};
}

void VCycleMethod::load_state(const nlohmann::json& state) {
  segment_ = state.at("segment");
  FRUGAL_CHECK(segment_ >= 0 && segment_ <= last_segment(), "{}: the checkpoint is in segment {} "
               "but this V-cycle has {}; resume the run with its own config", kPrefix, segment_ + 1,
               last_segment() + 1);
  const auto& level0 = state.at("level0");
  level0_layers_ = level0.at(0);
  level0_heads_ = level0.at(1);
  level0_embd_ = level0.at(2);
  const auto& stats = state.at("stats");
  FRUGAL_CHECK(stats.size() == stats_.size(), "{}: the checkpoint has statistics of {} levels but "
               "this V-cycle has {}; resume the run with its own config", kPrefix, stats.size(), stats_.size());
  for (size_t i = 0; i < stats_.size(); ++i)
    stats_[i] = {stats[i].at(0).get<int64_t>(), stats[i].at(1).get<double>(), stats[i].at(2).get<double>()};
}

Method::StateTensors VCycleMethod::state_tensors() const {
  StateTensors out;
  for (size_t i = 0; i < kept_.size(); ++i) out.emplace_back(fmt::format("kept.{}", i), kept_[i]);
  return out;
}

void VCycleMethod::load_state_tensors(std::map<std::string, std::vector<float>> tensors) {
  kept_.clear();
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = tensors.find(fmt::format("kept.{}", i));
    FRUGAL_CHECK(it != tensors.end(), "{}: the checkpoint's method tensors lack kept.{}; the "
                 "checkpoint is damaged", kPrefix, i);
    kept_.push_back(std::move(it->second));
  }
}

}  // namespace frugal::multilevel
