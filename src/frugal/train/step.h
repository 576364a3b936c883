// One optimizer step with the method events around it: the part of the training loop shared by
// `frugal train` and `frugal bench`. Fires BatchStart, per micro-batch BeforeForward ..
// AfterBackward, then AfterGradReduce, gradient clipping, BeforeOptimStep (sees the clipped
// gradients and the pre-clip norm), the AdamW update, AfterOptimStep,
// Reconfigure (when a method asked for it) and BatchEnd; counts the FLOPs executed.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/methods/method_set.h"
#include "frugal/model/flops.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"
#include "frugal/train/run_config.h"

namespace frugal {

// Fills one micro-batch: inputs (B,T), targets (B,T), sample ids (B).
using BatchSource = std::function<void(int32_t* inputs, int32_t* targets, int64_t* sample_ids)>;

struct StepResult {
  double loss = 0;  // mean over micro-batches
  float grad_norm = 0;
  PhaseFlops executed, dense;  // model FLOPs of the whole step
};

// Throws Error, before anything is allocated, when a training step of these settings (the model
// with its vocabulary size resolved, batch, sequence length, recomputation, AdamW's moments)
// needs more memory than the machine has available; the error gives the estimate and the keys
// that size it.
void check_memory_available(const RunSettings& settings);

class StepRunner {
 public:
  StepRunner(GPT& model, AdamW& optim, MethodSet& methods, const RunSettings& settings);
  // A context for events outside a step (Init, FitStart, Eval, Checkpoint, FitEnd).
  TrainContext context(int64_t step, nlohmann::json* record = nullptr);
  StepResult run(int64_t step, float lr, const BatchSource& next_batch, nlohmann::json* record);
  // The number of distinct training samples, passed to methods (TrainContext::num_samples).
  void set_num_samples(int64_t n) { num_samples_ = n; }

 private:
  GPT& model_;
  AdamW& optim_;
  MethodSet& methods_;
  const RunSettings& settings_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<int64_t> ids_;
  int64_t num_samples_ = 0;
};

}  // namespace frugal
