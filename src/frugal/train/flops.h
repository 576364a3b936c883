// FLOP accounting for a dense GPT training step, per phase. One formula, used by the trainer's
// logs, MFU and the benchmark:
//   linear (N rows, IC -> OC): forward 2·N·IC·OC, backward-input 2·N·IC·OC, backward-weight 2·N·IC·OC
//   causal attention per layer: forward 2·B·NH·HS·T(T+1) (q·kᵀ and p·v over the T(T+1)/2 causal
//   pairs), backward-input twice the forward (dq, dk, dv, dp); recomputation is not counted
//   LM head over the V real vocabulary columns, like a linear C -> V
//   optimizer: 12 FLOPs per trainable parameter (not part of MFU)
#pragma once
#include "frugal/model/config.h"
#include "frugal/model/param_table.h"

namespace frugal {

struct StepFlops {
  double forward = 0, backward_input = 0, backward_weight = 0, optimizer = 0;
  // Model FLOPs (forward + backward), the numerator of MFU.
  double model() const { return forward + backward_input + backward_weight; }
};

// FLOPs of one optimizer step on B·T tokens with every layer trainable and dense.
StepFlops dense_step_flops(const ModelConfig& config, int B, int T);

// Best-of-several single-precision GEMM rate of this machine with the current thread count, in
// FLOP/s: the MFU denominator ("measured peak"). Takes about a second.
double measure_gemm_peak_flops();

}  // namespace frugal
