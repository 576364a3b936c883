// The bias gradient's column sums, shared by the dense linear's backward (cpu/matmul.cpp) and the
// bf16 output-gradient rounding that computes them in the same pass (bf16_convert.h): one order of
// the sums, so both give the same bits.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace frugal::kernels::cpu {

// dbias (OC) += the column sums of dout (N,OC): fixed chunks of rows are summed contiguously
// (streaming reads), then the chunk partials are added in chunk order, so the result does not
// depend on threads. each_row(i) is called once per row i, by the thread that sums it, just
// before it does (a pass of its own over the row while it is in cache).
template <class EachRow>
void add_column_sums(float* dbias, const float* dout, int N, int OC, EachRow&& each_row) {
  constexpr int kRows = 64;
  const int chunks = (N + kRows - 1) / kRows;
  std::vector<float> partial(static_cast<size_t>(chunks) * OC, 0.0f);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * OC >= (1 << 16))
  for (int ch = 0; ch < chunks; ++ch) {
    float* acc = partial.data() + static_cast<size_t>(ch) * OC;
    for (int i = ch * kRows; i < std::min(N, (ch + 1) * kRows); ++i) {
      each_row(i);
      const float* d = dout + static_cast<size_t>(i) * OC;
#pragma omp simd
      for (int o = 0; o < OC; ++o) acc[o] += d[o];
    }
  }
  for (int ch = 0; ch < chunks; ++ch) {
    const float* acc = partial.data() + static_cast<size_t>(ch) * OC;
#pragma omp simd
    for (int o = 0; o < OC; ++o) dbias[o] += acc[o];
  }
}

}  // namespace frugal::kernels::cpu
