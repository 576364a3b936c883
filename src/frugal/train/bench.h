// The training-step benchmark behind `frugal bench`: times full steps (forward, backward, AdamW,
// and the enabled methods' events) on random tokens after warm-up, and reports ms/step, tokens/s,
// MFU against the measured GEMM peak, and peak resident memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frugal/io/config.h"

namespace frugal {

struct BenchPreset {
  io::Config config;  // the run config: preset values, then the --set overrides
  int warmup = 3, steps = 10;
  bool profile = false;  // time each kernel during the timed steps
};

// Presets of issue #2 — "S", "M", "L" (GPT-2 small) — expressed as run-config values, then
// `--set key=value` overrides (any run-config key, methods included). Throws for an unknown preset.
BenchPreset bench_preset(const std::string& name, const std::vector<std::string>& overrides = {});

struct BenchResult {
  double ms_per_step = 0, ms_min = 0, tokens_per_s = 0, mfu = 0;
  double model_flops_per_step = 0, dense_flops_per_step = 0, peak_flops = 0;
  uint64_t peak_rss_bytes = 0;
  size_t parameters = 0;
  int batch = 0, seq_len = 0;
  std::string memory_plan;
  std::string profile;  // per-kernel table when BenchPreset::profile
  std::string to_json(const std::string& preset, int threads) const;
};

BenchResult run_train_bench(const BenchPreset& preset);

}  // namespace frugal
