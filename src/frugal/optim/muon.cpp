// Muon's per-tensor update; see muon.h.
#include "frugal/optim/muon.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal {

MuonMatrices muon_matrices(const ParamInfo& e) {
  if (!e.hidden_matrix) return {};
  if (e.local.size() == 3) return {int(e.local[0]), int(e.local[1]), int(e.local[2])};
  return {1, int(e.local[0]), int(e.local[1])};
}

namespace {

// One tensor's matrices, with `u` the scratch of the Newton–Schulz input.
void update_tensor(const MuonTensor& t, const MuonConfig& c, float lr, std::vector<float>& u) {
  const MuonMatrices& shape = t.shape;
  const size_t n = size_t(shape.rows) * shape.cols;
  u.resize(n);
  const float beta = c.momentum, keep = 1.0f - lr * c.weight_decay;
  const float step = lr * static_cast<float>(std::sqrt(std::max(1.0, double(shape.rows) / shape.cols)));
  float* p = t.p;
  const float* g = t.g;
  float* buf = t.buf;
  for (int k = 0; k < shape.count; ++k, p += n, g += n, buf += n) {
    for (size_t i = 0; i < n; ++i) {
      buf[i] = beta * buf[i] + (1.0f - beta) * g[i];
      u[i] = c.nesterov ? (1.0f - beta) * g[i] + beta * buf[i] : buf[i];
    }
    (c.bf16 ? kernels::newton_schulz_bf16 : kernels::newton_schulz)(u.data(), shape.rows, shape.cols, c.ns_steps);
    for (size_t i = 0; i < n; ++i) p[i] = keep * p[i] - step * u[i];
  }
  if (t.copy) kernels::round_to_bf16(t.copy->data, t.p, t.copy->numel, t.copy->rounding);
}

// Newton–Schulz FLOPs of a tensor's matrices (muon.h's cost order).
double newton_schulz_flops(const MuonMatrices& s) {
  const double m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
  return s.count * (3 * m * m * n + m * m * m);  // per iteration, kernels/cpu/newton_schulz.cpp
}

}  // namespace

void muon_update(const std::vector<MuonTensor>& tensors, const MuonConfig& c, float lr) {
  FRUGAL_PROFILE("muon update");  // (the Newton–Schulz entries inside are not timed in a parallel region)
  thread_local std::vector<float> u;
  if (c.bf16 || tensors.size() < 2 || omp_get_max_threads() < 2) {
    for (const MuonTensor& t : tensors) update_tensor(t, c, lr, u);
    return;
  }
  std::vector<const MuonTensor*> order;
  for (const MuonTensor& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const MuonTensor* a, const MuonTensor* b) {
    return newton_schulz_flops(a->shape) > newton_schulz_flops(b->shape);
  });
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < order.size(); ++i) update_tensor(*order[i], c, lr, u);
}

}  // namespace frugal
