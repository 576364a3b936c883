// The training-step benchmark behind `frugal bench`: times full steps (forward, backward, AdamW)
// on random tokens after warm-up, and reports ms/step, tokens/s, MFU against the measured GEMM
// peak, and peak resident memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frugal/model/config.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"

namespace frugal {

struct BenchSetup {
  ModelConfig model;
  AdamWConfig optim;
  int batch = 1, seq_len = 1;
  int warmup = 3, steps = 10;
  int frozen_layers = 0;
  std::vector<bool> recompute;  // per block; empty = none
  uint64_t seed = 1337;
};

// Presets of issue #2: "S", "M", "L" (GPT-2 small), then `--set key=value` overrides of the run
// config (model.*, optim.*, train.batch_size, train.seq_len, train.recompute, train.seed).
// Throws for an unknown preset or key.
BenchSetup bench_preset(const std::string& name, const std::vector<std::string>& overrides = {});

struct BenchResult {
  double ms_per_step = 0, ms_min = 0, tokens_per_s = 0, mfu = 0;
  double model_flops_per_step = 0, peak_flops = 0;
  uint64_t peak_rss_bytes = 0;
  size_t parameters = 0;
  std::string memory_plan;
  std::string to_json(const std::string& preset, int threads) const;
};

BenchResult run_train_bench(const BenchSetup& setup);

}  // namespace frugal
