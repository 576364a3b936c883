// Benchmark of a whole GPT-2 FFN block (fc → GELU → fc_proj) forward + backward, dense (the
// model's BLAS path) against 2:4 (Sparse24Format on both linears, as the sparse24 method runs it),
// including the 2:4 upkeep of a training step: the masked decay of both weights' gradients and
// the repacking of both weights after every optimizer step, and the transposable mask search
// amortised over `mask_interval` steps.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frugal/methods/sparse24/plugin.h"

namespace frugal::sparse24 {

struct FfnBenchOptions {
  std::vector<int> rows = {1024, 4096};    // N = B*T
  std::vector<int> channels = {384, 768};  // C; the hidden width is 4C
  int repeats = 9;                         // interleaved dense/2:4 repetitions (median taken)
  int mask_interval = Sparse24Config{}.mask_interval;             // steps per mask search
  float decay = static_cast<float>(Sparse24Config{}.decay);        // λ_W of the masked decay
};

struct FfnBenchRow {
  int N = 0, C = 0;
  double dense_ms = 0;       // fwd + bwd (both linears: forward, input and weight gradients)
  double sparse_ms = 0;      // the same through the 2:4 formats
  double repack_ms = 0;      // refresh() of both formats (every step)
  double decay_ms = 0;       // masked decay of both weight gradients (every step)
  double mask_ms = 0;        // transposable mask search of both weights (every mask_interval)
  double sparse_step_ms = 0; // sparse_ms + repack_ms + decay_ms + mask_ms / mask_interval
  double ratio = 0;          // dense_ms / sparse_step_ms
};

// Runs every (N, C); the thread count is whatever is set (set_num_threads).
std::vector<FfnBenchRow> run_ffn_benchmark(const FfnBenchOptions& options);
std::string format_ffn_table(const std::vector<FfnBenchRow>& rows, int mask_interval);
nlohmann::json ffn_rows_to_json(const std::vector<FfnBenchRow>& rows);

}  // namespace frugal::sparse24
