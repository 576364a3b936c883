// Muon (Keller Jordan, 2024: MomentUm Orthogonalized by Newton–Schulz) for the hidden weight
// matrices, the other half of the session's optimizer when optim.name = "muon" (AdamW keeps the
// embeddings, the head, routers, LayerNorm gains and biases; optim/adamw.h).
//
// Per matrix W (R,C) with gradient G, momentum β and buffer M (kept in AdamW's first-moment buffer
// at W's offsets, so checkpoints, ZeRO shards, reshapes and pipeline moves carry it as they carry m):
//   M ← β·M + (1 − β)·G
//   U ← (1 − β)·G + β·M  (Nesterov)   or   U ← M
//   O ← newton_schulz(U, ns_steps)     (kernels/ops.h: ≈ the orthogonal polar factor of U)
//   W ← (1 − lr·wd)·W − lr·√max(1, R/C)·O
// As in the Muon reference: the Nesterov form, the quintic coefficients (3.4445, −4.7750, 2.0315),
// Frobenius pre-normalisation and the √max(1, R/C) scale; unlike it, the iteration runs in fp32 (the
// reference uses bf16 on GPUs). An expert tensor (E, R, C) is E matrices, each orthogonalised alone.
#pragma once
#include <cstddef>
#include <vector>

#include "frugal/model/param_table.h"

namespace frugal {

struct MuonConfig {
  bool enabled = false;  // optim.name = "muon"
  float lr = 0.02f;      // peak; the schedule scales it as it scales optim.lr
  float momentum = 0.95f;
  bool nesterov = true;
  int ns_steps = 5;
  float weight_decay = 0.0f;  // decoupled, like AdamW's
  bool bf16 = false;          // optim.muon.precision = "bf16": Newton–Schulz's products on bf16 operands
};

// The matrices of tensor e that Muon updates: `count` of (rows, cols) each, contiguous; count 0
// when AdamW updates e.
struct MuonMatrices {
  int count = 0, rows = 0, cols = 0;
  size_t numel() const { return size_t(count) * rows * cols; }
};
MuonMatrices muon_matrices(const ParamInfo& e);

// One Muon step on one tensor's matrices: p, g, buf (shape.numel()); `scratch` is reused between
// calls. lr: this step's Muon learning rate.
void muon_update(float* p, const float* g, float* buf, const MuonMatrices& shape, const MuonConfig& c, float lr,
                 std::vector<float>& scratch);

}  // namespace frugal
