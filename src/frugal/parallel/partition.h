// AutoPipe (PipeTransformer): how a GPT's blocks are cut into pipeline stages, from the cost of
// each unit (its measured time, or the bytes it holds), and how far a pipeline shortens when layers
// freeze. Pure functions: the pipeline strategy (pipeline.h) gets the costs and applies the layouts.
//
// Stages are cut between blocks (the model's range API runs whole blocks), so a block's attention
// and MLP sublayers travel together; the units balanced are the embeddings, each block and the
// head (ln_f, the LM head and the loss). The frozen prefix stays in the first stage, where it runs
// forward only (AutoCache may serve it), and every stage holds at least one trainable block.
#pragma once
#include <string>
#include <vector>

#include "frugal/model/param_table.h"

namespace frugal::parallel {

// The cost of each unit in two parts, the backward one counted only while the unit trains: the
// seconds one micro-batch spends in its forward and backward (the head's backward is the part
// after its fused forward: ln_f's), or, from parameter_costs, bytes it holds.
struct UnitCosts {
  double embeddings_forward = 0, embeddings_backward = 0;
  std::vector<double> block_forward, block_backward;  // per block
  double head_forward = 0, head_backward = 0;
  int n_layer() const { return static_cast<int>(block_forward.size()); }
};

// One layout of the ranks: `replicas` data-parallel copies of a pipeline of `stages` stages;
// stage k holds blocks [bounds[k], bounds[k + 1]) (bounds[0] = 0, bounds[stages] = n_layer),
// the first one the embeddings, the last one the head.
struct PipelineLayout {
  int stages = 1, replicas = 1;
  std::vector<int> bounds;
  bool operator==(const PipelineLayout&) const = default;
  std::string describe() const;  // "2 stages × 1 replica, blocks [0, 3) [3, 6)"
  std::string describe_blocks() const;  // "blocks [0, 3) [3, 6)"
};
// "2 stages × 1 replica"
std::string describe_shape(int stages, int replicas);

// The bytes each unit holds: "forward" its parameters, "backward" their gradients and AdamW's two
// moments, which a frozen unit does without. A tied head's copy of the token embedding counts on
// the head its weights and gradient (its moments live with the embeddings).
UnitCosts parameter_costs(const ModelConfig& config);

// What `range` updates of tensor `e` (of a model of n_layer blocks): the embeddings, its blocks,
// ln_f and the head. A last stage's copy of a tied head's token embedding is held, not owned: the
// first stage updates it and sends it on.
bool owns(const BlockRange& range, const ParamInfo& e, int n_layer);
// One tensor that a re-partition sends from rank `from` to rank `to`: its weights, and AdamW's
// moments when `to` owns it afterwards.
struct TensorMove {
  std::string name;
  int from = 0, to = 0;
  bool moments = false;
  bool operator==(const TensorMove&) const = default;
};
// The tensors ranks send so that rank r, holding now[r], holds next[r]: each tensor of next[r]
// that r does not own now comes from the lowest rank that does (in the order of r, then of r's
// table); what r owns now it keeps and is not listed.
std::vector<TensorMove> tensor_moves(const ModelConfig& config, const std::vector<BlockRange>& now,
                                     const std::vector<BlockRange>& next);

// The cost (seconds per micro-batch, or bytes) of the stage holding blocks [begin, end) with `frozen` blocks (and,
// when frozen > 0, the embeddings) running forward only.
double stage_cost(const UnitCosts& costs, int frozen, int begin, int end);
// The slowest (costliest) stage of `bounds`.
double slowest_stage(const UnitCosts& costs, int frozen, const std::vector<int>& bounds);
// Whether `stages` stages can each hold a trainable block with the frozen prefix in the first.
bool can_partition(int n_layer, int frozen, int stages);
// The cut into `stages` stages (can_partition must hold) whose slowest stage is the fastest
// possible, the frozen prefix within the first stage (exact: dynamic programming over the cuts;
// ties go to the cut that puts fewer blocks first).
std::vector<int> balance_stages(const UnitCosts& costs, int frozen, int stages);
// AutoPipe after a freeze, for `ranks` ranks now running `stages` stages: halves the pipeline
// while the halved, re-balanced pipeline's slowest stage is no slower than `limit` (the slowest
// stage of the layout the run started with), and further whenever fewer trainable blocks than
// stages remain; the ranks a shorter pipeline frees become replicas (AutoDP). With elastic =
// false the pipeline keeps its length (only re-balanced); can_partition must then hold.
PipelineLayout autopipe(const UnitCosts& costs, int frozen, int stages, int ranks, double limit, bool elastic);

}  // namespace frugal::parallel
