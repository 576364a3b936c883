// Benchmark of a mixture-of-experts MLP against the dense MLP with the same active FLOPs, forward
// + backward as a training step runs them (model/moe.h, the same components the model runs): E
// experts of H / top_k hidden units each, every token routed to top_k of them, against one dense
// MLP of H hidden units (so both spend 2·2·N·C·H multiply-adds per pass on the MLP; the MoE adds
// its router, 2·N·E·C). Shapes: a preset's N = B·T rows and width C (H = 4C). Used by
// `frugal bench --kernel moe`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace frugal::bench {

struct MoeBenchOptions {
  std::vector<const char*> presets = {"S", "M"};
  int experts = 8, top_k = 2;
  int repeats = 9;  // interleaved dense/MoE repetitions (median taken)
};

struct MoeBenchRow {
  std::string preset;
  int N = 0, C = 0, experts = 0, top_k = 0, expert_hidden = 0, dense_hidden = 0;
  double dense_ms = 0, moe_ms = 0;  // forward + backward, medians
  double max_over_mean_load = 0;   // of the routing timed
  double ratio() const { return dense_ms / moe_ms; }  // the MoE's tokens/s over the dense MLP's
};

// Runs every preset; the thread count is whatever is set (set_num_threads).
std::vector<MoeBenchRow> run_moe_benchmark(const MoeBenchOptions& options);
std::string format_moe_table(const std::vector<MoeBenchRow>& rows);
nlohmann::json moe_rows_to_json(const std::vector<MoeBenchRow>& rows);

}  // namespace frugal::bench
