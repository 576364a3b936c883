// Benchmark of the unstructured sparse linear kernels (kernels/cpu/sparse_linear.h) against the
// dense linear (kernels::matmul_forward / matmul_backward, on the dense GEMM backend) for the three
// training products, per shape and mask density, measured side by side (interleaved repetitions,
// medians); also the pack (structure rebuild after a mask change) and refresh-values times. Used by
// bench/bench_sparse_linear.cpp and `frugal bench --kernel sparse`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frugal/kernels/cpu/sparse_linear.h"

namespace frugal::kernels {

struct SparseLinearBenchOptions {
  std::vector<int> rows = {2048, 8192};            // N = B*T
  std::vector<int> channels = {256, 384, 768};     // C; layers fc1 (4C, C), fc2 (C, 4C), qkv (3C, C)
  std::vector<double> densities = {0.5, 0.2, 0.1, 0.05};
  int threads = 2;                                 // for OpenMP and the dense GEMM
  int repeats = 5;                                 // interleaved dense/sparse repetitions
  Isa isa = Isa::Auto;
};

struct SparseLinearBenchRow {
  std::string layer;  // "fc1" (OC=4C, IC=C), "fc2" (OC=C, IC=4C) or "qkv" (OC=3C, IC=C)
  int N = 0, IC = 0, OC = 0;
  double density = 0;  // kept entries / (OC·IC) of the random mask
  // medians in ms: forward, input gradient, weight gradient
  double dense_ms[3] = {0, 0, 0}, sparse_ms[3] = {0, 0, 0};
  double ratio[3] = {0, 0, 0};  // dense_ms / sparse_ms per product
  double total_ratio = 0;       // Σ dense_ms / Σ sparse_ms: the three products together
  double pack_ms = 0, refresh_ms = 0;  // medians
};

// Runs every (N, C, layer, density) and returns one row each; sets the thread count and ISA.
std::vector<SparseLinearBenchRow> run_sparse_linear_benchmark(const SparseLinearBenchOptions& options);

// A fixed-width text table of the rows, and the same rows as JSON.
std::string format_sparse_linear_table(const std::vector<SparseLinearBenchRow>& rows);
nlohmann::json sparse_linear_rows_to_json(const std::vector<SparseLinearBenchRow>& rows);

}  // namespace frugal::kernels
