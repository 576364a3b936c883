// Data parallelism as a step strategy (train/step.h), applied to the model from outside: each of
// the N ranks (a mesh of data N, mesh.h) holds the whole model and runs train.grad_accum
// micro-batches of every optimizer step, a disjoint slice of the global batch of N × grad_accum micro-batches (rank r takes
// micro-batches r·A .. r·A + A − 1 of the order one process would draw them in, with the same
// dropout keys), so N ranks compute what one process computes with N × grad_accum micro-batches.
// Gradients are reduced during the last micro-batch's backward (gradient_reducer.h); the loss is
// the mean over all micro-batches, added in the one-process order. ZeRO (parallel.zero):
//   0  every rank all-reduces the gradients and runs AdamW over the whole model;
//   1  the gradients are all-reduced, but each rank keeps AdamW's moments for, and updates, only
//      its shard (1/N of the flat buffer); the updated parameters are all-gathered;
//   2  as 1, but gradients are reduce-scattered: a rank receives the sums of its shard only, and
//      the gradient norm is one chained sum over the shards in order (bit-identical to one
//      process's). At a step where a method reads every block's gradients (mst's topology
//      update, adaptive freezing) the reduced shards are all-gathered first, whole on every rank
//      for that step.
// A method that reshapes the model (the V-cycle) runs under every stage: the ranks reshape alike,
// and ZeRO gathers the moments whole around the reshape and cuts the new buffer's again.
#pragma once
#include <memory>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/parallel/gradient_reducer.h"
#include "frugal/parallel/mpi_mesh.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/train/step.h"

namespace frugal::parallel {

// After a step in which every rank of `world` ran its own losses.size() micro-batches (rank r
// those r·A .. r·A + A − 1 of one process's order): r.loss = the mean of every rank's losses, added
// in one-process order; r's FLOPs summed over the ranks; the model's step routing (the experts'
// load) summed over the ranks, so every rank moves the balancing bias alike.
void add_ranks_results(MpiWorld& world, const std::vector<double>& losses, GPT& model, StepResult& r);

class DataParallelStep final : public StepStrategy {
 public:
  DataParallelStep(Session& session, MethodSet& methods, const RunSettings& settings, MpiWorld& world);
  ~DataParallelStep() override;
  const char* name() const override;
  double tokens_per_step(int64_t step) const override { return StepStrategy::tokens_per_step(step) * world_.size(); }
  // ZeRO-2: this rank's shard (the rest of the buffer takes memory only while reduced).
  size_t resident_gradient_bytes() const override;

  // The ZeRO shards: rank r owns [bounds[r], bounds[r + 1]) of the flat buffer.
  const std::vector<size_t>& shard_bounds() const { return shards_; }

 protected:
  void begin_context(TrainContext& ctx) override;  // the replicas share their caches
  void reset_gradients() override;                 // ZeRO-2: other shards' pages released
  // Each rank its micro-batches; gradients reduced in buckets during the last backward.
  void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch, StepResult& r) override;
  float clip_gradients() override;  // ZeRO-2: the norm chained over the shards
  void update(float lr) override;   // ZeRO-1/2: the updated shards all-gathered
  void add_metrics(nlohmann::json& record) override;  // "comm"
  void reconfigure(TrainContext& ctx) override;        // shards follow a reshape

 private:
  // Adds the token-embedding gradient rows of every rank's last micro-batch (left out of the
  // backward, see GPT::set_defer_token_embedding_grad) to the reduced gradients.
  void add_embedding_grads(GPT& model);
  // Gathers every rank's shard of buffer[begin, total) onto every rank (buffer indexed like the
  // flat parameter buffer: the updated parameters, or the moments before a reshape).
  void allgather_shards(float* buffer, size_t begin);
  int replica() const { return mesh_->coordinate(Dim::Data); }
  MPI_Comm replicas() const { return mesh_->group(Dim::Data); }  // the norm chain and the all-gathers

  MpiWorld& world_;
  int zero_;
  MPI_Comm base_;
  std::unique_ptr<MpiMesh> mesh_;  // data N over base_
  std::vector<size_t> shards_;
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<int32_t> all_tokens_;  // add_embedding_grads: every rank's (B,T) tokens
  std::vector<float> all_rows_;       // and (B,T,C) embedding-output gradients
  // The step's seconds: computing the micro-batches, waiting for the last buckets after them,
  // and (from clipping on) the update.
  double compute_seconds_ = 0, wait_seconds_ = 0;
  Timer update_timer_;
};

}  // namespace frugal::parallel
