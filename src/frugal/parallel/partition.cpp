// AutoPipe's partitioning; see partition.h.
#include "frugal/parallel/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "frugal/core/error.h"

namespace frugal::parallel {

std::string describe_shape(int stages, int replicas) {
  return fmt::format("{} stage{} × {} replica{}", stages, stages == 1 ? "" : "s", replicas, replicas == 1 ? "" : "s");
}

std::string PipelineLayout::describe() const {
  return fmt::format("{}, {}", describe_shape(stages, replicas), describe_blocks());
}

std::string PipelineLayout::describe_blocks() const {
  std::string blocks = "blocks";
  for (int k = 0; k < stages; ++k) blocks += fmt::format(" [{}, {})", bounds[k], bounds[k + 1]);
  return blocks;
}

UnitCosts parameter_costs(const ModelConfig& config) {
  const int L = config.n_layer;
  UnitCosts c;
  c.block_forward.assign(L, 0.0);
  c.block_backward.assign(L, 0.0);
  constexpr double kParameter = sizeof(float), kTrainingState = 3 * sizeof(float);  // gradient, m, v
  const ParamTable table = ParamTable::build(config);
  for (const ParamInfo& e : table.entries()) {
    const double n = double(e.numel);
    auto [held, trained] = e.layer < 0 ? std::tie(c.embeddings_forward, c.embeddings_backward)
                           : e.layer >= L ? std::tie(c.head_forward, c.head_backward)
                                          : std::tie(c.block_forward[e.layer], c.block_backward[e.layer]);
    held += kParameter * n;
    trained += kTrainingState * n;
    if (config.tied_head && e.name == "transformer.wte.weight") {  // the head's copy: weights, gradient
      c.head_forward += kParameter * n;
      c.head_backward += kParameter * n;
    }
  }
  return c;
}

bool owns(const BlockRange& range, const ParamInfo& e, int n_layer) {
  if (e.layer < 0) return range.embeddings;
  if (e.layer >= n_layer) return range.head;
  return range.contains(e.layer);
}

std::vector<TensorMove> tensor_moves(const ModelConfig& config, const std::vector<BlockRange>& now,
                                     const std::vector<BlockRange>& next) {
  FRUGAL_CHECK(now.size() == next.size(), "internal: a re-partition of {} ranks into {}", now.size(), next.size());
  const int L = config.n_layer;
  std::vector<TensorMove> moves;
  for (size_t to = 0; to < next.size(); ++to) {
    const ParamTable table = ParamTable::build(config, next[to]);
    for (const ParamInfo& e : table.entries()) {
      if (owns(now[to], e, L)) continue;
      const auto owner = std::find_if(now.begin(), now.end(), [&](const BlockRange& r) { return owns(r, e, L); });
      FRUGAL_CHECK(owner != now.end(), "internal: no rank owns {} before a re-partition", e.name);
      moves.push_back({e.name, static_cast<int>(owner - now.begin()), static_cast<int>(to), owns(next[to], e, L)});
    }
  }
  return moves;
}

double stage_cost(const UnitCosts& c, int frozen, int begin, int end) {
  double cost = 0;
  if (begin == 0) cost += c.embeddings_forward + (frozen == 0 ? c.embeddings_backward : 0);
  for (int l = begin; l < end; ++l) cost += c.block_forward[l] + (l >= frozen ? c.block_backward[l] : 0);
  if (end == c.n_layer()) cost += c.head_forward + c.head_backward;
  return cost;
}

double slowest_stage(const UnitCosts& c, int frozen, const std::vector<int>& bounds) {
  double slowest = 0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    slowest = std::max(slowest, stage_cost(c, frozen, bounds[k], bounds[k + 1]));
  return slowest;
}

bool can_partition(int n_layer, int frozen, int stages) {
  // The first stage ends past the frozen prefix; every other stage has a block of its own.
  return stages >= 1 && std::min(frozen, n_layer - 1) + 1 + (stages - 1) <= n_layer;
}

std::vector<int> balance_stages(const UnitCosts& c, int frozen, int stages) {
  const int L = c.n_layer();
  FRUGAL_CHECK(can_partition(L, frozen, stages), "internal: {} blocks with {} frozen cannot form {} "
               "pipeline stages", L, frozen, stages);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][e]: the slowest stage of blocks [0, e) cut into k stages; cut[k][e]: where the last began.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int e = k; e <= L; ++e)
      for (int b = k - 1; b < e; ++b) {
        if (best[k - 1][b] == kInf) continue;
        if (k == 1 && e <= std::min(frozen, L - 1)) continue;  // the first stage must train a block
        const double slowest = std::max(best[k - 1][b], stage_cost(c, frozen, b, e));
        if (slowest < best[k][e]) {
          best[k][e] = slowest;
          cut[k][e] = b;
        }
      }
  std::vector<int> bounds(stages + 1);
  bounds[stages] = L;
  for (int k = stages; k > 0; --k) bounds[k - 1] = cut[k][bounds[k]];
  return bounds;
}

PipelineLayout autopipe(const UnitCosts& c, int frozen, int stages, int ranks, double limit, bool elastic) {
  const int L = c.n_layer();
  int K = stages;
  if (elastic) {
    while (K > 1) {
      const int shorter = K % 2 == 0 ? K / 2 : 1;
      if (!can_partition(L, frozen, K) ||
          slowest_stage(c, frozen, balance_stages(c, frozen, shorter)) <= limit)
        K = shorter;
      else
        break;
    }
  }
  FRUGAL_CHECK(can_partition(L, frozen, K), "{} of the model's {} blocks are frozen, which leaves "
               "fewer trainable blocks than the {} pipeline stages; set parallel.elastic = true (the "
               "pipeline then shortens) or methods.freeze.max_frozen <= {}", frozen, L, K, L - K);
  return {K, ranks / K, balance_stages(c, frozen, K)};
}

}  // namespace frugal::parallel
