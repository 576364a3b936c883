// FLOP accounting for a training step of a model, per layer and per phase, both as executed (knowing what is
// frozen, cached or sparse) and as the dense model would need. Each component counts its own
// (TransformerBlock::flops, Objective::flops); this adds them up with the optimizer's, for the
// trainer's metrics, MFU and the benchmark. The rules:
//   linear (N rows, IC -> OC): forward 2·N·IC·OC, backward-input 2·N·IC·OC, backward-weight
//     2·N·IC·OC, each scaled by the linear's LinearFormat: forward_density(),
//     backward_input_density() and weight_grad_density() (1 for the dense format)
//   attention per block: forward 4·B·NH·HS·pairs(T) (q·kᵀ and p·v over the pairs(T) (query, key)
//     pairs the block's AttentionPattern allows; Causal: T(T+1)/2, so 2·B·NH·HS·T(T+1)),
//     backward-input twice the forward (dq, dk, dv, dp); recomputation is not counted. The dense
//     model is counted with Causal attention, like dense linears
//   LM head over the V real vocabulary columns, like a linear C -> V; its input gradient runs
//     whenever the step trains (the final LayerNorm, trainable even with every block frozen,
//     needs it)
//   optimizer: 12 FLOPs per trainable parameter (not part of MFU)
//   embeddings, LayerNorms and activations are memory-bound and not counted
// A frozen block runs forward only; a block inside a cached prefix runs nothing.
#pragma once
#include <vector>

#include "frugal/model/config.h"
#include "frugal/model/flop_count.h"
#include "frugal/model/gpt.h"

namespace frugal {

struct StepFlops {
  // index 0: embeddings, 1..L: blocks, L+1: final LayerNorm and head
  std::vector<PhaseFlops> executed, dense;
  PhaseFlops executed_total() const;
  PhaseFlops dense_total() const;
};

// FLOPs of one micro-batch of B·T tokens for `model` (its block range) as now configured (frozen prefix,
// linear formats), with the first `cached_prefix_blocks` blocks served from cached activations.
StepFlops count_step_flops(const GPT& model, int B, int T, int cached_prefix_blocks = 0);

}  // namespace frugal
