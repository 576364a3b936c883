// AutoCache for the freeze method; see autocache.h.
#include "frugal/methods/freeze/autocache.h"

#include <algorithm>
#include <filesystem>

#include "frugal/core/error.h"
#include "frugal/model/flops.h"

namespace frugal::freeze {

AutoCacheMode parse_autocache_mode(const std::string& s) {
  if (s == "off") return AutoCacheMode::Off;
  if (s == "on") return AutoCacheMode::On;
  if (s == "auto") return AutoCacheMode::Auto;
  fail("methods.freeze.autocache = \"{}\" is not one of \"auto\", \"on\", \"off\"", s);
}

double prefix_flops_per_byte(const GPT& model, int T, int k) {
  const StepFlops f = count_step_flops(model, 1, T);
  double flops = 0;
  for (int l = 0; l < k; ++l) flops += f.dense[l + 1].forward;
  return flops / (double(T) * model.config().n_embd * sizeof(float));
}

bool AutoCache::pays(const TrainContext& ctx, int frozen, int64_t next_step) const {
  // With dropout, or an encoder's dynamic masks, a sample's frozen-prefix output differs at every visit.
  const ModelConfig& m = ctx.model().config();
  if (frozen == 0 || m.dropout != 0.0f || m.encoder() || ctx.num_samples <= 0) return false;
  const int64_t visits = (ctx.max_steps - next_step) * ctx.batch * ctx.grad_accum;
  if (visits <= ctx.num_samples) return false;  // no sample comes back
  const double bytes = double(ctx.num_samples) * ctx.seq_len * ctx.model().config().n_embd * sizeof(float);
  const bool spills = bytes > double(config_.memory_mb) * (1 << 20);
  return prefix_flops_per_byte(ctx.model(), ctx.seq_len, frozen) >
         (spills ? kDiskBreakEvenFlopsPerByte : kMemoryBreakEvenFlopsPerByte);
}

void AutoCache::update(const TrainContext& ctx, int frozen, int64_t next_step) {
  active_ = !turned_off_ && (config_.mode == AutoCacheMode::On ||
                             (config_.mode == AutoCacheMode::Auto && pays(ctx, frozen, next_step)));
  if (!active_) {
    cache_.reset();
    return;
  }
  if (cache_) return;
  const size_t floats = size_t(ctx.seq_len) * ctx.model().config().n_embd;
  const std::string dir = config_.dir.empty() ? (std::filesystem::path(ctx.run_dir) / "autocache").string()
                                              : config_.dir;
  cache_ = std::make_unique<PrefixCache>(floats, size_t(config_.memory_mb) << 20, dir);
  batch_.resize(floats * ctx.batch);
}

void AutoCache::drop() {
  cache_.reset();
  pending_keys_.clear();
  pending_.clear();
  format_version_ = 0;
}

void AutoCache::lose_cache(const SpillError& e) {
  failure_ = e.what();
  cache_.reset();
  pending_keys_.clear();
  pending_.clear();
}

void AutoCache::serve(TrainContext& ctx, int frozen) {
  if (!active_ || frozen == 0 || !cache_) return;
  // Entries of every level are outputs of blocks below `frozen`.
  if (const uint64_t version = ctx.model().prefix_format_version(frozen); version != format_version_) {
    cache_->clear();
    format_version_ = version;
  }
  const int B = ctx.batch;
  // The deepest level <= frozen that every sample of the micro-batch holds, read into batch_ (0: none).
  int served = 0;
  const std::vector<int> first = cache_->levels(ctx.sample_ids[0]);
  for (auto level = first.rbegin(); level != first.rend() && served == 0; ++level) {
    if (*level > frozen) continue;
    bool all = true;
    for (int b = 1; b < B && all; ++b) all = cache_->has(ctx.sample_ids[b], *level);
    if (!all) continue;
    const size_t floats = cache_->sample_floats();
    try {
      for (int b = 0; b < B; ++b) cache_->read(ctx.sample_ids[b], *level, batch_.data() + b * floats);
      served = *level;
    } catch (const SpillError& e) {
      lose_cache(e);
      break;  // computed, as a miss
    }
  }
  if (ctx.replicas_in_lockstep && ctx.replicas > 1) {  // served only where every replica is served alike
    std::vector<int> all(ctx.replicas);
    ctx.allgather_replicas(&served, sizeof served, all.data());
    if (std::ranges::any_of(all, [&](int level) { return level != served; })) served = 0;
  }
  if (served == 0) {
    ++misses_;
    return;
  }
  ctx.prefix_output = batch_.data();
  ctx.prefix_blocks = served;
  ++hits_;
}

void AutoCache::store(const TrainContext& ctx, int frozen) {
  if (!active_ || frozen == 0 || !cache_) return;
  const size_t floats = cache_->sample_floats(), B = ctx.batch;
  const bool replicated = ctx.allgather_replicas && ctx.replicas > 1;
  // Levels this forward computed: above the one it was fed at (all, without a cached prefix).
  const int fed = ctx.prefix_output ? ctx.prefix_blocks : 0;
  // The current level, and the older ones still held: new samples get those too, so micro-batches
  // mixing them with samples cached before the prefix grew share that level and are served.
  std::vector<int> levels{frozen};
  for (const int level : cache_->held_levels())
    if (level < frozen) levels.push_back(level);
  for (const int level : levels) {
    if (level <= fed) continue;
    const float* out = ctx.model().block_output(level - 1);  // (B,T,C)
    for (size_t b = 0; b < B; ++b) {
      try {
        if (!cache_->has(ctx.sample_ids[b], level)) cache_->write(ctx.sample_ids[b], level, out + b * floats);
      } catch (const SpillError& e) {
        lose_cache(e);
        return;
      }
      if (replicated) {  // for the other replicas, at the end of the step (share)
        pending_keys_.insert(pending_keys_.end(), {ctx.sample_ids[b], level});
        pending_.insert(pending_.end(), out + b * floats, out + (b + 1) * floats);
      }
    }
  }
  // Older levels go once every cached sample holds the current one.
  if (cache_->count(frozen) == cache_->samples())
    for (const int level : cache_->held_levels())
      if (level != frozen) cache_->drop_level(level);
}

void AutoCache::end_step(const TrainContext& ctx) {
  if (!active_) return;
  bool failed = !failure_.empty();
  if (ctx.allgather_replicas && ctx.replicas > 1) {
    // Two collectives per step: how many entries each replica stored (-1: its spill failed), then
    // all of them (padded to the largest count; a key of -1 is padding).
    int64_t count = failed ? -1 : static_cast<int64_t>(pending_keys_.size() / 2);
    std::vector<int64_t> counts(ctx.replicas);
    ctx.allgather_replicas(&count, sizeof count, counts.data());
    failed = *std::min_element(counts.begin(), counts.end()) < 0;
    if (!failed) share(ctx, counts);
  }
  pending_keys_.clear();
  pending_.clear();
  if (!failed) return;
  active_ = false;
  turned_off_ = true;
  cache_.reset();
  if (ctx.metrics) {
    (*ctx.metrics)["event"] = "autocache off";
    (*ctx.metrics)["warning"] = fmt::format(
        "AutoCache turned itself off for the rest of the run: {}; training goes on, computing the frozen "
        "prefix (free disk space in methods.freeze.cache_dir or raise methods.freeze.cache_memory_mb "
        "for the next run)", failure_.empty() ? "another replica's spill file failed" : failure_);
  }
  failure_.clear();
}

void AutoCache::share(const TrainContext& ctx, const std::vector<int64_t>& counts) {
  const size_t R = counts.size(), floats = cache_->sample_floats();
  const size_t most = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  if (most > 0) {
    pending_keys_.resize(2 * most, -1);
    pending_.resize(most * floats, 0.0f);
    std::vector<int64_t> keys(2 * most * R);
    std::vector<float> data(most * floats * R);
    ctx.allgather_replicas(pending_keys_.data(), 2 * most * sizeof(int64_t), keys.data());
    ctx.allgather_replicas(pending_.data(), most * floats * sizeof(float), data.data());
    try {
      for (size_t e = 0; e < most * R; ++e) {
        const int64_t id = keys[2 * e];
        const int level = static_cast<int>(keys[2 * e + 1]);
        if (id >= 0 && !cache_->has(id, level)) cache_->write(id, level, data.data() + e * floats);
      }
    } catch (const SpillError& e) {
      lose_cache(e);  // turned off at the next step's end, with the other replicas
    }
  }
}

void AutoCache::add_metrics(nlohmann::json& record) {
  if (!active_ || !cache_) return;
  record["autocache_hits"] = hits_;
  record["autocache_misses"] = misses_;
  record["autocache_samples"] = cache_->samples();
  record["autocache_on_disk"] = cache_->entries_on_disk();
}

}  // namespace frugal::freeze
