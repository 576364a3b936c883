// The training-step benchmark behind `frugal bench`: times full steps (forward, backward, AdamW,
// and the enabled methods' events) on a fixed batch of random tokens after warm-up, and reports
// ms/step, tokens/s, MFU against the measured GEMM peak and the FMA peak, and peak resident memory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/io/config.h"
#include "frugal/train/process_group.h"
#include "frugal/train/step.h"

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
// Under a data-parallel strategy: a step's time is the slowest rank's, tokens count every rank's
// micro-batches, peak RSS is the largest rank's, the GEMM peak is every rank's measured at once
// (their sum), and the communication fields are filled (rank 0's figures).
struct BenchResult {
  double ms_per_step = 0, ms_min = 0, ms_mean = 0, tokens_per_s = 0, mfu = 0;
  int ranks = 1;
  std::string strategy;
  // Mean over the timed steps of the seconds the step waited for gradient buckets after its
  // backward (communication not hidden behind it), as a share of the step time; the gradient
  // bytes handed to the collectives per step, and the bytes a ring all-reduce moves for them per
  // rank, 2(N-1)/N of that (computed, not measured: MPI chooses the algorithm).
  double comm_wait_share = 0, gradient_bytes = 0, ring_bytes = 0;
  // Tensor parallelism: the seconds its exchanges ran in the background beside the computation
  // (the backward's input-gradient sums, hidden behind the weight gradients), as a share of the
  // step time; comm_wait_share is then the time the step waited inside its collectives.
  double comm_hidden_share = 0;
  int buckets = 0;
  // Expert parallelism: the seconds inside the experts' all-to-all exchanges as a share of the
  // step time (all exposed), and the bytes a rank sends to the others per step.
  double exchange_share = 0, exchange_bytes = 0;
  double model_flops_per_step = 0, dense_flops_per_step = 0, peak_flops = 0;
  // The FMA peak (kernels/cpu/blas_peak.h), measured in the same run as the GEMM peak (every
  // rank's at once, summed), and the MFU against it.
  double fma_peak_flops = 0, mfu_fma = 0;
  std::string fma_isa;  // the vector instructions of the FMA peak: "AVX-512" or "AVX2"
  uint64_t peak_rss_bytes = 0;
  size_t parameters = 0;
  int batch = 0, seq_len = 0, warmup = 0, steps = 0;
  std::string memory_plan;
  std::string precision;  // describe_precision of train.precision
  std::string profile;  // per-kernel table when BenchPreset::profile
  std::string to_json(const std::string& preset, int threads) const;
};

// Every rank of `group` calls it with the same preset; `strategy` runs the steps.
BenchResult run_train_bench(const BenchPreset& preset, const StepStrategyFactory& strategy = make_single_process_step,
                            ProcessGroup& group = single_process());

}  // namespace frugal
