// AutoCache of the freeze method: the PrefixCache store (levels, spill to disk, slot reuse), exact
// equality of the training losses with the cache on and off (fixed and growing prefixes, in
// memory and spilled to disk), the dropout refusal, and when "auto" turns itself on.
#include <gtest/gtest.h>

#include <sys/mount.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/methods/freeze/autocache.h"
#include "frugal/methods/freeze/prefix_cache.h"
#include "frugal/train/trainer.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
using frugal::freeze::PrefixCache;
using frugal::testing::TempDir;

namespace {

// 1200 characters: 67 training samples of 16 tokens, so a 30-step run of batch 8 (8 steps per
// epoch) sees every sample three times or more.
std::string make_data(const TempDir& dir) { return frugal::testing::make_shakespeare_data(dir, 1200); }

io::Config config(const std::string& data, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.dir=" + data, "train.out_dir=" + out, "model.n_layer=4",
                                "model.n_head=2", "model.n_embd=16", "model.block_size=16",
                                "train.batch_size=8", "train.max_steps=30", "train.eval_interval=15",
                                "train.eval_batches=2", "train.log_interval=1", "train.threads=1",
                                "optim.warmup_steps=2", "sample.count=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", o);
}

struct CacheStats {
  int64_t hits = 0, misses = 0, max_on_disk = 0;
};

CacheStats read_stats(const std::string& run_dir) {
  CacheStats s;
  for (const nlohmann::json& j : frugal::testing::logged_records(run_dir)) {
    s.hits = std::max(s.hits, j.value("autocache_hits", int64_t{0}));  // cumulative counts
    s.misses = std::max(s.misses, j.value("autocache_misses", int64_t{0}));
    s.max_on_disk = std::max(s.max_on_disk, j.value("autocache_on_disk", int64_t{0}));
  }
  return s;
}

// Trains with the given freeze settings and AutoCache off, then once per entry of `variants`
// (extra overrides); expects the same losses bit for bit. Returns the cache statistics of each
// variant.
std::vector<CacheStats> expect_same_losses(const std::vector<std::string>& freeze,
                                           const std::vector<std::vector<std::string>>& variants) {
  TempDir dir;
  const std::string data = make_data(dir);
  auto off = freeze;
  off.push_back("methods.freeze.autocache=off");
  Trainer a(config(data, dir.file("off"), off), {.quiet = true});
  const FitResult ra = a.fit();
  EXPECT_EQ(read_stats(dir.file("off")).hits, 0);
  std::vector<CacheStats> stats;
  for (size_t v = 0; v < variants.size(); ++v) {
    auto on = freeze;
    on.insert(on.end(), variants[v].begin(), variants[v].end());
    const std::string out = dir.file("on" + std::to_string(v));
    Trainer b(config(data, out, on), {.quiet = true});
    const FitResult rb = b.fit();
    EXPECT_EQ(ra.losses.size(), rb.losses.size());
    for (size_t i = 0; i < ra.losses.size() && i < rb.losses.size(); ++i)
      EXPECT_EQ(ra.losses[i], rb.losses[i]) << "variant " << v << " step " << i + 1;
    EXPECT_EQ(ra.final_val_loss, rb.final_val_loss) << "variant " << v;
    stats.push_back(read_stats(out));
  }
  return stats;
}

}  // namespace

TEST(PrefixCache, KeepsLevelsSpillsToDiskAndReusesSlots) {
  TempDir dir;
  const size_t floats = 6;
  // Budget of two entries in memory; the rest goes to the spill file.
  PrefixCache cache(floats, 2 * floats * sizeof(float), dir.file("spill"));
  auto tensor = [&](int64_t id, int level) {
    std::vector<float> v(floats);
    for (size_t i = 0; i < floats; ++i) v[i] = float(id * 100 + level * 10) + float(i);
    return v;
  };
  for (int64_t id = 0; id < 4; ++id) cache.write(id, 1, tensor(id, 1).data());
  EXPECT_EQ(cache.samples(), 4u);
  EXPECT_EQ(cache.entries_on_disk(), 2u);
  EXPECT_EQ(cache.spill_file_bytes(), 2 * floats * sizeof(float));
  // The spill file has no name: nothing another process could open, nothing left after a crash.
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("spill")));
  cache.write(2, 3, tensor(2, 3).data());
  EXPECT_EQ(cache.levels(2), (std::vector<int>{1, 3}));
  EXPECT_EQ(cache.levels(9), std::vector<int>{});
  EXPECT_EQ(cache.count(1), 4u);
  EXPECT_EQ(cache.count(3), 1u);
  std::vector<float> out(floats);
  for (int64_t id = 0; id < 4; ++id) {
    cache.read(id, 1, out.data());
    EXPECT_EQ(out, tensor(id, 1)) << id;
  }
  cache.read(2, 3, out.data());
  EXPECT_EQ(out, tensor(2, 3));
  cache.drop_level(1);
  EXPECT_EQ(cache.samples(), 1u);
  EXPECT_FALSE(cache.has(0, 1));
  EXPECT_EQ(cache.entries_on_disk(), 1u);  // (2, 3) went to disk
  // Freed slots are reused: three new entries fill the two freed memory slots and a freed disk
  // slot, so the spill file (3 slots so far) does not grow.
  for (int64_t id = 10; id < 13; ++id) cache.write(id, 3, tensor(id, 3).data());
  for (int64_t id = 10; id < 13; ++id) {
    cache.read(id, 3, out.data());
    EXPECT_EQ(out, tensor(id, 3)) << id;
  }
  EXPECT_EQ(cache.spill_file_bytes(), 3 * floats * sizeof(float));
  EXPECT_EQ(cache.entries_on_disk(), 2u);
  cache.write(10, 3, tensor(11, 3).data());  // replace in place
  cache.read(10, 3, out.data());
  EXPECT_EQ(out, tensor(11, 3));
}

TEST(PrefixCache, ASpillFileThatCannotBeCreatedIsASpillError) {
  TempDir dir;
  std::ofstream(dir.file("a_file")) << "x";
  PrefixCache cache(4, 0, dir.file("a_file/spill"));  // a directory below a file
  const std::vector<float> v(4, 1.0f);
  EXPECT_THROW(cache.write(0, 1, v.data()), freeze::SpillError);
}

// A spill directory on a full disk (a small tmpfs): the cache turns itself off with a warning in
// the log, and the run trains to the end with the losses of a run without it.
TEST(AutoCache, AFullSpillDiskTurnsTheCacheOffAndTheRunGoesOn) {
  TempDir dir;
  const std::string data = make_data(dir), spill = dir.file("small");
  std::filesystem::create_directories(spill);
  // 1 KiB per entry (16 tokens × 16 floats): 8 entries fit, the 67 samples do not.
  if (::mount("tmpfs", spill.c_str(), "tmpfs", 0, "size=8k") != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{spill};
  const std::vector<std::string> freeze = {"methods.freeze.frozen_layers=2", "model.dropout=0"};
  auto off = freeze, on = freeze;
  off.push_back("methods.freeze.autocache=off");
  on.insert(on.end(), {"methods.freeze.autocache=on", "methods.freeze.cache_memory_mb=0",
                       "methods.freeze.cache_dir=" + spill});
  const FitResult plain = Trainer(config(data, dir.file("off"), off), {.quiet = true}).fit();
  const FitResult cached = Trainer(config(data, dir.file("on"), on), {.quiet = true}).fit();
  EXPECT_EQ(plain.losses, cached.losses);
  EXPECT_EQ(plain.final_val_loss, cached.final_val_loss);
  int turned_off = 0;
  for (const nlohmann::json& j : frugal::testing::logged_records(dir.file("on"))) {
    if (j.value("event", "") != "autocache off") continue;
    ++turned_off;
    EXPECT_NE(j.value("warning", "").find("No space left on device"), std::string::npos) << j.dump();
    EXPECT_LE(j["step"].get<int>(), 2) << "the first two steps spill 16 entries";
  }
  EXPECT_EQ(turned_off, 1);
}

TEST(AutoCache, SameLossesWithAndWithoutForAFixedPrefix) {
  const auto s = expect_same_losses({"methods.freeze.frozen_layers=3"},
                                    {{"methods.freeze.autocache=on"},
                                     {"methods.freeze.autocache=on", "methods.freeze.cache_memory_mb=0"},
                                     {"methods.freeze.autocache=auto"}});
  EXPECT_GT(s[0].hits, 10) << "samples are revisited, the cache must serve them";
  EXPECT_EQ(s[0].max_on_disk, 0);
  EXPECT_GT(s[1].hits, 10) << "spilled to disk";
  EXPECT_GT(s[1].max_on_disk, 60);
  EXPECT_EQ(s[2].hits, s[0].hits) << "auto: samples come back, so the cache is on";
}

TEST(AutoCache, SameLossesWhenThePrefixGrows) {
  // alpha 1/2 every 8 steps on 4 blocks: 2, then 3 frozen; cached level-2 entries serve the
  // level-3 prefix (only block 2 runs on them) until every sample holds level 3.
  const auto s = expect_same_losses({"methods.freeze.alpha=0.5", "methods.freeze.interval=8"},
                                    {{"methods.freeze.autocache=on"}});
  EXPECT_GT(s[0].hits, 10);
}

TEST(AutoCache, AutoStaysOffWhenNoSampleComesBack) {
  // 8 steps of 8 samples visit fewer than the 67 samples.
  TempDir dir;
  Trainer t(config(make_data(dir), dir.file("a"), {"methods.freeze.frozen_layers=2", "train.max_steps=8"}),
            {.quiet = true});
  t.fit();
  const CacheStats s = read_stats(dir.file("a"));
  EXPECT_EQ(s.hits + s.misses, 0);
}

TEST(AutoCache, RefusesOnWithDropoutAndAutoStaysOff) {
  TempDir dir;
  const std::string data = make_data(dir);
  try {
    Trainer t(config(data, dir.file("a"), {"methods.freeze.frozen_layers=2", "model.dropout=0.1",
                                           "methods.freeze.autocache=on"}), {.quiet = true});
    FAIL() << "autocache=on with dropout must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.dropout = 0"), std::string::npos) << e.what();
  }
  Trainer t(config(data, dir.file("b"), {"methods.freeze.frozen_layers=2", "model.dropout=0.1"}), {.quiet = true});
  t.fit();
  const CacheStats s = read_stats(dir.file("b"));
  EXPECT_EQ(s.hits + s.misses, 0);
}

TEST(AutoCache, BreakEvenIntensityGrowsWithThePrefix) {
  ModelConfig c;
  c.n_layer = 4, c.n_head = 2, c.n_embd = 32, c.block_size = 16, c.vocab_size = 65;
  GPT model(c);
  const double one = freeze::prefix_flops_per_byte(model, 16, 1);
  EXPECT_DOUBLE_EQ(freeze::prefix_flops_per_byte(model, 16, 3), 3 * one);
  // per token: linears 2·12C² + attention 2·C·(T+1) (causal mean), over 4C bytes
  EXPECT_DOUBLE_EQ(one, (2.0 * 12 * 32 * 32 * 16 + 2.0 * 32 * 16 * 17) / (16 * 32 * 4));
}

TEST(AutoCache, StaysExactWhenSparse24SwitchesTheFrozenBlocksToDense) {
  // sparse24's dense fine-tuning (the last half of the 30 steps) changes what the frozen blocks
  // compute: outputs cached through their 2:4 formats must not be served after the switch.
  const auto stats = expect_same_losses({"methods.freeze.frozen_layers=2", "methods.sparse24.mask_interval=5",
                                         "methods.sparse24.dense_finetune_fraction=0.5"},
                                        {{"methods.freeze.autocache=on"}});
  EXPECT_GT(stats[0].hits, 0) << "the cache must have served micro-batches before and after the switch";
}
