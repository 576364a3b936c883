// The training-step benchmark behind `frugal bench`: times full steps (forward, backward, AdamW,
// and the enabled methods' events) on a fixed batch of random tokens after warm-up, and reports
// ms/step, tokens/s, MFU against the measured GEMM peak, and peak resident memory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/io/config.h"

namespace frugal {

struct BenchPreset {
  io::Config config;  // the run config: preset values, the --set overrides, the bench's own keys
  int warmup = 3, steps = 10;
  bool profile = false;  // time each kernel during the timed steps
  std::vector<std::string> notes;  // config values the bench replaced, one line each, for the user
};

// Presets of issue #2 — "S", "M", "L" (GPT-2 small) — expressed as run-config values, then
// `--set key=value` overrides (any run-config key, methods included), then the step counts (unset:
// the preset's). The config then describes the run the bench makes, so methods that schedule off
// train.max_steps see its horizon: train.max_steps = warmup + steps. And the timed steps measure
// the methods' steady state: sparse24's dense fine-tuning, which would fall inside them, is
// turned off. Replaced values are listed in `notes`. Throws for an unknown preset.
BenchPreset bench_preset(const std::string& name, const std::vector<std::string>& overrides = {},
                         std::optional<int> warmup = {}, std::optional<int> steps = {});

// Over the timed steps: ms_per_step and tokens_per_s from the median step time (robust on a shared
// machine); ms_min; the mean step time, executed and dense-equivalent model FLOPs per step and
// MFU from their sums (FLOPs change from step to step with the methods' state).
struct BenchResult {
  double ms_per_step = 0, ms_min = 0, ms_mean = 0, tokens_per_s = 0, mfu = 0;
  double model_flops_per_step = 0, dense_flops_per_step = 0, peak_flops = 0;
  uint64_t peak_rss_bytes = 0;
  size_t parameters = 0;
  int batch = 0, seq_len = 0, warmup = 0, steps = 0;
  std::string memory_plan;
  std::string profile;  // per-kernel table when BenchPreset::profile
  std::string to_json(const std::string& preset, int threads) const;
};

BenchResult run_train_bench(const BenchPreset& preset);

}  // namespace frugal
