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

#include "frugal/model/param_table.h"  // ParamInfo, WorkingCopy

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

// One tensor of a Muon step: its parameters, gradients and momentum buffer (shape.numel() each),
// and its bf16 working copy (null: none), rounded from the updated parameters.
struct MuonTensor {
  float* p;
  const float* g;
  float* buf;
  MuonMatrices shape;
  const WorkingCopy* copy = nullptr;
};

// One Muon step on every tensor's matrices; lr: this step's Muon learning rate. With more than one
// OpenMP thread and fp32 Newton–Schulz, each thread takes whole tensors, the costliest first, and
// runs their GEMMs single-threaded: the products of one matrix at the widths a CPU trains do not
// keep two threads busy, and the element-wise passes (momentum, norm, update) then run in
// parallel too. Each tensor's result is the same whichever thread computes it. (bf16
// Newton–Schulz runs one tensor at a time: its oneDNN primitives are not made for concurrent calls.)
void muon_update(const std::vector<MuonTensor>& tensors, const MuonConfig& c, float lr);

}  // namespace frugal
