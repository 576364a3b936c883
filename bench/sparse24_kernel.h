// Benchmark of the 2:4 sparse linear kernels against the dense GEMM (kernels/cpu/gemm.h: oneDNN by
// default) on the FFN shapes (fc1: OC=4C, IC=C; fc2: OC=C, IC=4C), both products, measured side by
// side (interleaved repetitions, medians). Used by bench/bench_sparse24.cpp and `frugal bench --kernel sparse24`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frugal/kernels/cpu/sparse24.h"

namespace frugal::kernels {

struct Sparse24BenchOptions {
  std::vector<int> rows = {1024, 4096};  // N = B*T
  std::vector<int> channels = {384, 768};  // C
  int threads = 2;                       // for both OpenMP and OpenBLAS
  int repeats = 9;                       // interleaved dense/sparse repetitions per product
  Isa isa = Isa::Auto;
};

struct Sparse24BenchRow {
  std::string layer;    // "fc1" or "fc2"
  std::string product;  // "forward" (X·S(W)ᵀ) or "backward_input" (dY·S(W))
  int N = 0, IC = 0, OC = 0;
  double dense_ms = 0, sparse_ms = 0;            // medians
  double dense_gflops = 0, sparse_gflops = 0;    // both counted as 2·N·IC·OC / time
  double ratio = 0;                              // dense_ms / sparse_ms
  double pack_ms = 0;                            // sparse24_pack of this layer (W and Wᵀ), median
  double mask_ms = 0;                            // transposable_mask_24 of this layer, median
};

// Runs every (N, C, layer, product) and returns one row each; sets the thread count.
std::vector<Sparse24BenchRow> run_sparse24_benchmark(const Sparse24BenchOptions& options);

// A fixed-width text table of the rows, and the same rows as JSON.
std::string format_sparse24_table(const std::vector<Sparse24BenchRow>& rows);
nlohmann::json sparse24_rows_to_json(const std::vector<Sparse24BenchRow>& rows);

}  // namespace frugal::kernels
