// Muon's per-tensor update; see muon.h.
#include "frugal/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "frugal/kernels/ops.h"

namespace frugal {

MuonMatrices muon_matrices(const ParamInfo& e) {
  if (!e.hidden_matrix) return {};
  if (e.local.size() == 3) return {int(e.local[0]), int(e.local[1]), int(e.local[2])};
  return {1, int(e.local[0]), int(e.local[1])};
}

void muon_update(float* p, const float* g, float* buf, const MuonMatrices& shape, const MuonConfig& c, float lr,
                 std::vector<float>& scratch) {
  const size_t n = size_t(shape.rows) * shape.cols;
  scratch.resize(n);
  float* u = scratch.data();
  const float beta = c.momentum, keep = 1.0f - lr * c.weight_decay;
  const float step = lr * static_cast<float>(std::sqrt(std::max(1.0, double(shape.rows) / shape.cols)));
  for (int k = 0; k < shape.count; ++k, p += n, g += n, buf += n) {
    for (size_t i = 0; i < n; ++i) {
      buf[i] = beta * buf[i] + (1.0f - beta) * g[i];
      u[i] = c.nesterov ? (1.0f - beta) * g[i] + beta * buf[i] : buf[i];
    }
    (c.bf16 ? kernels::newton_schulz_bf16 : kernels::newton_schulz)(u, shape.rows, shape.cols, c.ns_steps);
    for (size_t i = 0; i < n; ++i) p[i] = keep * p[i] - step * u[i];
  }
}

}  // namespace frugal
