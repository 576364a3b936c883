// How the LM head's kernels (kernels/cpu/lm_head.cpp) cut their N rows into chunks, so that no
// (N,V) logits buffer is needed: as many equal chunks as keep one chunk's logits within a 32 MiB
// scratch. Dependency-free: the GEMM-shape table of the benchmarks (bench/step_shapes.h) reads it
// too, also where it is compiled against other GEMM libraries alone.
#pragma once
#include <algorithm>
#include <cstddef>

namespace frugal::kernels {

// Rows per chunk: the M of the head's GEMMs (the last chunk may have fewer).
inline int lm_head_chunk_rows(int N, int V) {
  constexpr size_t kLogitsBudget = size_t(8) << 20;  // floats of logits scratch (32 MiB)
  const int most =
      static_cast<int>(std::clamp<size_t>(kLogitsBudget / static_cast<size_t>(V), 1, static_cast<size_t>(N)));
  const int chunks = (N + most - 1) / most;
  return (N + chunks - 1) / chunks;
}

}  // namespace frugal::kernels
