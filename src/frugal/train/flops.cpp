// FLOP formulas and the measured GEMM peak; see flops.h.
#include "frugal/train/flops.h"

#include <algorithm>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/kernels/ops.h"

namespace frugal {

StepFlops dense_step_flops(const ModelConfig& c, int B, int T) {
  const double N = double(B) * T, C = c.n_embd, H = c.ffn_hidden(), L = c.n_layer;
  const double mlp_in = c.gated() ? 2 * C * H : C * H;
  const double linear_per_row = L * (3 * C * C + C * C + mlp_in + H * C) + C * c.vocab_size;
  const double linear = 2 * N * linear_per_row;
  const double attention = L * 2.0 * B * c.n_head * c.head_size() * double(T) * (T + 1);
  StepFlops f;
  f.forward = linear + attention;
  f.backward_input = linear + 2 * attention;
  f.backward_weight = linear;
  double params = 0;
  for (const ParamInfo& e : ParamTable::build(c).entries()) params += double(e.numel);
  f.optimizer = 12 * params;
  return f;
}

double measure_gemm_peak_flops() {
  // The square shape large enough for the BLAS to reach steady state (linear forward with
  // N = C = OC = 1536).
  const int n = 1536;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    Timer t;
    kernels::matmul_forward(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::min(best, t.seconds());
  }
  return 2.0 * n * double(n) * n / best;
}

}  // namespace frugal
