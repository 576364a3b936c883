// AutoCache (PipeTransformer): the frozen prefix's output for each training sample is cached and
// fed back to GPT::forward (TrainContext::prefix_output) when the sample is revisited, so the
// frozen blocks do not run again. When the prefix grows from m to k blocks, entries at level m
// stay valid (blocks below m never change again): a micro-batch whose samples all hold level m is
// fed at level m and only blocks [m, k) run; its output is stored at level k. While level m is
// still held, newly cached samples get it too (so batches mixing old and new samples share a
// level); it is dropped once every cached sample holds level k. Exact: the cached tensors are the
// bits the prefix would compute again (GPT runs the frozen prefix sample by sample, no dropout).
// A spill file that fails (a full disk) turns the cache off for the rest of the run, on every
// replica at the same step end, with a warning: the run goes on, computing the prefix.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/memory.h"
#include "frugal/methods/freeze/prefix_cache.h"
#include "frugal/methods/method.h"

namespace frugal::freeze {

enum class AutoCacheMode { Off, On, Auto };
AutoCacheMode parse_autocache_mode(const std::string& s);  // "off" | "on" | "auto"

struct AutoCacheConfig {
  AutoCacheMode mode = AutoCacheMode::Auto;
  int64_t memory_mb = 2048;  // in-memory budget; entries beyond it spill to disk
  std::string dir;           // spill directory; empty: <train.out_dir>/autocache (each process
                             // spills to an unnamed file of its own there)
};

// Machine balance measured by bench/bench_autocache (see docs/methods.md): recomputing a prefix
// costs more than reading its cached output when the prefix's forward FLOPs per cached byte
// exceed this many (memory: a memcpy; disk: a read from the spill file, page cache cold).
inline constexpr double kMemoryBreakEvenFlopsPerByte = 4.0;
inline constexpr double kDiskBreakEvenFlopsPerByte = 60.0;

// Forward FLOPs of blocks [0, k) per cached byte (T·C floats) of one sample.
double prefix_flops_per_byte(const GPT& model, int T, int k);

class AutoCache {
 public:
  explicit AutoCache(AutoCacheConfig config) : config_(std::move(config)) {}

  // Decides whether caching runs from step `next_step` on with a frozen prefix of `frozen` blocks
  // (at FitStart and after every prefix change). "auto": on when samples will be revisited and
  // the read is cheaper than recomputing; turning off frees the cache.
  void update(const TrainContext& ctx, int frozen, int64_t next_step);
  bool active() const { return active_; }
  // After a reshape (the V-cycle's level change): every entry belongs to the old shapes; dropped.
  void drop();
  // BeforeForward: feeds the micro-batch from the cache when all its samples share a level.
  void serve(TrainContext& ctx, int frozen);
  // AfterForward: stores the frozen prefix's output of the micro-batch's samples (with
  // data-parallel replicas, also keeps it for share()).
  void store(const TrainContext& ctx, int frozen);
  // BatchEnd, with data-parallel replicas (TrainContext::allgather_replicas): every replica
  // stores what every other one stored during the step, so a sample revisited on another replica
  // is served there too. Then, if a spill failed during the step on any replica, every replica
  // turns the cache off and the step's record gets an "event" and a "warning".
  void end_step(const TrainContext& ctx);
  // BatchEnd: micro-batches served / not served so far and the cache's size.
  void add_metrics(nlohmann::json& record);

 private:
  bool pays(const TrainContext& ctx, int frozen, int64_t next_step) const;
  // A spill failed: the cache's content is undefined. Dropped now; turned off at end_step.
  void lose_cache(const SpillError& e);
  // end_step's exchange of the entries stored this step, given every replica's count.
  void share(const TrainContext& ctx, const std::vector<int64_t>& counts);

  AutoCacheConfig config_;
  bool active_ = false;
  std::unique_ptr<PrefixCache> cache_;
  Buffer<float> batch_;  // (B,T,C) assembled prefix output
  std::vector<int64_t> pending_keys_;  // (sample id, level) of each entry stored this step,
  std::vector<float> pending_;         // and its (T,C) tensor: what share() sends
  // GPT::prefix_format_version of the frozen prefix the entries were computed with: another
  // method (sparse24 at its dense fine-tuning switch) changing a frozen block's format makes
  // every entry stale.
  uint64_t format_version_ = 0;
  int64_t hits_ = 0, misses_ = 0;  // cumulative over this fit
  std::string failure_;            // this replica's spill failure during the current step
  bool turned_off_ = false;        // after a failure: off for the rest of the run
};

}  // namespace frugal::freeze
