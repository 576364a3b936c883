// Expert parallelism as a step strategy (train/step.h): the mixtures' experts split over the P ranks
// of an expert group, everything else data parallel. The N ranks form a mesh of data N/P × expert P
// (mesh.h; rank = d·P + p): each rank holds experts p·E/P .. (p+1)·E/P − 1 of every mixture
// (Placement::experts), the router, the balancing bias, the shared expert and every other tensor
// whole, and, as under data parallelism, runs its own micro-batches: rank r takes micro-batches
// r·A .. r·A + A − 1 of the N·A one process would draw (same dropout keys), so the N ranks compute
// what one process computes with N × grad_accum micro-batches. Inside each mixture the ranks of an
// expert group exchange the routed rows with MPI all-to-all (model/moe.h) through
// MpiExpertCollectives.
//
// Gradients, after the last backward (not overlapped): the replicated tensors' are summed over the
// expert group, then the whole shard over the N/P ranks holding the same experts (none when N = P):
// the replicated tensors' over all N ranks, each expert's (which already holds the contributions
// of every token routed to it from its group) over its data group. ZeRO-1/2 shard the moments (and
// the gradients) over those data groups (ZeroOverReplicas, zero.h). Every micro-batch's
// loss carries one process's 1/(N·A) scale, so the sums are one process's gradients. The global
// norm adds the expert tensors' squares over the expert group and the replicated ones' once. The
// experts' load is summed over every rank, so the balancing bias moves alike everywhere, as one
// process's.
//
// The session starts whole and becomes this rank's shard at the first step; synchronize() gathers
// the whole model on every rank (shards.h): checkpoints, evaluation and samples are one process's,
// and a run resumes at any expert degree. Pipelines, tensor parallelism and the methods a mixture
// does not run with (all but freezing) are refused with experts split.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/kernels/dtype.h"
#include "frugal/model/collectives.h"
#include "frugal/model/param_table.h"
#include "frugal/parallel/mpi_mesh.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/train/step.h"

namespace frugal::parallel {

class ZeroOverReplicas;  // zero.h

// The collectives of one rank of an expert group over MPI: its all-to-all (counts with
// MPI_Alltoall, rows with MPI_Alltoallv, in the wire dtype of parallel.comm_dtype: bf16 rounds the
// rows to nearest even, half the bytes); the tensor group is this rank alone. Counts the seconds
// and the bytes it sends to other ranks.
class MpiExpertCollectives final : public TensorCollectives {
 public:
  // `group`: the expert group's communicator, its ranks ordered by their expert coordinate.
  MpiExpertCollectives(MpiWorld& world, MPI_Comm group, kernels::DType wire = kernels::DType::F32);
  ShardCoord coord() const override { return {0, 1, rank_, size_}; }
  void all_reduce_sum(float*, size_t) override {}  // a tensor group of one
  void all_reduce_max(float*, size_t) override {}
  void all_to_all(const int32_t* send, int32_t* recv, int per_rank) override;
  void all_to_all_rows(const float* send, const int32_t* send_rows, float* recv, const int32_t* recv_rows,
                       int width) override;
  // Every rank's `local` (n floats each) into out (size · n), in rank order.
  void all_gather(const float* local, size_t n, float* out);
  // Each of `values` summed over the group's ranks in rank order (the same bits on every rank).
  void sum_each(std::span<double> values);

  // Since the last reset: seconds inside the exchanges, their calls, and the bytes this rank sent
  // to the others (its own rows stay).
  void reset_counters() { seconds_ = 0, calls_ = 0, bytes_ = 0; }
  double seconds() const { return seconds_; }
  int calls() const { return calls_; }
  double bytes() const { return bytes_; }

 private:
  MpiWorld& world_;
  MPI_Comm group_;
  int rank_ = 0, size_ = 1;
  kernels::DType wire_;
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;  // all_to_all_rows, in values
  std::vector<kernels::bf16> sent16_, received16_;                           // the rows on a bf16 wire
  double seconds_ = 0, bytes_ = 0;
  int calls_ = 0;
};

class ExpertParallelStep final : public StepStrategy {
 public:
  ExpertParallelStep(Session& session, MethodSet& methods, const RunSettings& settings, MpiWorld& world);
  ~ExpertParallelStep() override;
  const char* name() const override { return name_.c_str(); }
  double tokens_per_step(int64_t step) const override { return StepStrategy::tokens_per_step(step) * world_.size(); }
  StepResult run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) override;
  void synchronize() override;
  size_t resident_gradient_bytes() const override;  // ZeRO-2: this data group's part
  size_t optimizer_bytes() const override;          // ZeRO: this data group's part of the moments

 protected:
  void reset_gradients() override;  // ZeRO-2: the other data groups' parts released
  void begin_context(TrainContext& ctx) override;  // the replicas share their caches
  // Each rank its micro-batches; the gradients summed as above; losses added in one process's order.
  void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch, StepResult& r) override;
  float clip_gradients() override;  // expert tensors' squares summed over the group, replicated once
  void update(float lr) override;   // ZeRO-1/2: the data groups' updated parts all-gathered
  void add_metrics(nlohmann::json& record) override;  // "comm": the exchanges and the reductions

 private:
  // Rebuilds the session around this rank's experts (sharded) or the whole model; a no-op when it
  // already is.
  void hold(bool sharded);
  // Sums the gradients: the replicated tensors' over every rank, the experts' over the data group.
  void reduce_gradients(GPT& model);

  MpiWorld& world_;
  std::string name_;
  MPI_Comm base_;
  std::unique_ptr<MpiMesh> mesh_;  // data N/P × expert P over base_
  std::unique_ptr<MpiExpertCollectives> comm_;
  ParamTable shard_table_;  // this rank's shard's
  // parallel.zero: AdamW's moments (1) and the gradients (2) sharded over the data groups
  std::unique_ptr<ZeroOverReplicas> zero_;
  bool sharded_ = false;
  kernels::DType wire_;
  std::vector<kernels::bf16> staged_;  // a reduction's bf16 payload (parallel/wire.h)
  double compute_seconds_ = 0, reduce_seconds_ = 0, bytes_reduced_ = 0;
  int reductions_ = 0;  // the step's all-reduce calls
  Timer update_timer_;  // from clipping on
};

}  // namespace frugal::parallel
