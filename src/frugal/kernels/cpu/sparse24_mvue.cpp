// The MVUE 2:4 estimator of an output gradient along the token dimension (mvue24_rows in
// kernels/ops.h): one pass, OpenMP over row pairs, counter-based random numbers so the result is
// independent of the thread count. It is its own naive reference (no kernels/ref/ twin).
#include <cmath>

#include "frugal/core/rng.h"
#include "frugal/kernels/cpu/sparse24.h"

namespace frugal::kernels::cpu {

void mvue24_rows(float* dout_sparse, const float* dout, int N, int OC, uint64_t key, const int32_t* column,
                 int whole_OC) {
  const int pairs = N / 2;
  const uint64_t stride = column ? static_cast<uint64_t>(whole_OC) : static_cast<uint64_t>(OC);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < pairs; ++p) {
    const float* a = dout + static_cast<size_t>(2 * p) * OC;
    const float* b = a + OC;
    float* sa = dout_sparse + static_cast<size_t>(2 * p) * OC;
    float* sb = sa + OC;
    for (int o = 0; o < OC; ++o) {
      const float abs_a = std::fabs(a[o]), total = abs_a + std::fabs(b[o]);
      const bool keep_a = total > 0 && uniform_at(key, p * stride + (column ? column[o] : o)) * total < abs_a;
      sa[o] = keep_a ? std::copysign(total, a[o]) : 0.0f;
      sb[o] = keep_a || total == 0 ? 0.0f : std::copysign(total, b[o]);
    }
  }
  if (N % 2)
    for (int o = 0; o < OC; ++o)
      dout_sparse[static_cast<size_t>(N - 1) * OC + o] = dout[static_cast<size_t>(N - 1) * OC + o];
}

}  // namespace frugal::kernels::cpu
