// Megatron-style tensor parallelism as a step strategy (train/step.h), applied from outside the
// model, optionally with data parallelism over D = ranks / T replicas of the tensor group (a mesh
// of data D × tensor T, mesh.h). The T ranks of a tensor group each hold a shard of the model
// — their placements' parts of every split tensor (ModelSpec: attention heads, MLP hidden units,
// the vocabulary of the token embedding and the head), and the replicated ones whole — with its
// gradients and AdamW moments, and run every micro-batch together, meeting inside each block and
// in the vocabulary-parallel embedding and cross-entropy through MpiTensorCollectives. With
// parallel.sequence each rank holds only its rows of the residual stream between the linears
// (model/block.h: all-gathers and reduce-scatters in place of the sums, and the replicated
// tensors' gradients of those rows summed over the group in the model's backward). The backward's
// sums of the column-parallel input gradients run beside the weight gradients (start_sum_rows,
// parallel.tensor_overlap). Every
// replicated tensor's gradient is the same bits on every rank (without sequence parallelism
// because the residual stream is); the
// global gradient norm adds the split tensors' sums of squares over the ranks and the replicated
// ones' once, so clipping and AdamW on each rank's shard keep the replicas identical. With D > 1
// replica d's tensor group runs micro-batches d·A .. d·A + A − 1 of the step (A = grad_accum) in
// one process's order, and each shard's gradients are summed over its D replicas after the
// backward (not overlapped), as a pipeline's replicas do.
//
// Without methods the session becomes this rank's shard before any weight is written
// (enter_parts: each rank initialises its part, or reads it from a sharded checkpoint of this
// degree); otherwise it starts whole (initialised or loaded as in one process) and becomes the
// shard at the first step. It stays the shard for evaluation (each tensor group runs the sharded
// forward over its replica's share of the validation batches) and for checkpoints (sharded: each
// rank of the first replica writes its shard, train/checkpoint.h; any layout, or one process,
// reads them back whole) to the end of the run; synchronize() (before samples) gathers the whole model,
// weights and moments, on every rank, and the next step scatters it again. With D > 1, ZeRO
// (parallel.zero) shards each tensor shard's AdamW moments (1) and gradients (2) over its D
// replicas as DataParallelStep does over its ranks (zero.h): each replica updates its part and the
// parts are all-gathered; a shard's moments are gathered over its replicas around a checkpoint
// and synchronize(), so checkpoints are the same as ZeRO-0's. A method that owns masks or reshapes
// acts on the whole model, gathered around the Reconfigure; the next step cuts it again with its
// formats (LinearFormat::cut). A step whose AfterGradReduce reads whole linears' gradients (mst's
// growth) gathers the model with its gradients for it and cuts it again before the clip; adaptive
// freezing's per-block sums are added over the group (sum_over_parts).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "frugal/core/timer.h"
#include "frugal/kernels/dtype.h"
#include "frugal/model/collectives.h"
#include "frugal/parallel/mpi_mesh.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/train/step.h"

namespace frugal::parallel {

class ZeroOverReplicas;  // zero.h

// The TensorCollectives of one rank of a tensor group over MPI. Deterministic: each reduction
// all-gathers every rank's values (or, for a reduce-scatter, all-to-alls the slices) and combines
// them in rank order, so every rank gets the same bits (an MPI_Allreduce may add in a different
// order on different ranks). The backward's sums of the column-parallel input gradients run in
// the background (start_sum_rows): a thread of this rank waits on the exchange, which MPI only
// moves forward while someone is inside it, while this rank computes the weight gradients; the
// rank-order additions follow in finish_sum_rows. Counts the seconds this rank waited (exposed),
// the seconds exchanges ran beside its computation (hidden), its calls and the bytes it sent.
class MpiTensorCollectives final : public TensorCollectives {
 public:
  // `group`: the tensor group's communicator, its ranks ordered by their tensor coordinate;
  // `sequence`: the models built on it split their rows between the linears (parallel.sequence);
  // `overlap`: start_sum_rows runs in the background (parallel.tensor_overlap); `wire`: the dtype
  // the row messages (sum_rows, gather_rows) travel in (parallel.comm_dtype): bf16 rounds each
  // rank's rows to nearest even and adds them in fp32, half the bytes.
  MpiTensorCollectives(MpiWorld& world, MPI_Comm group, bool sequence = false, bool overlap = true,
                       kernels::DType wire = kernels::DType::F32);
  ~MpiTensorCollectives() override;
  ShardCoord coord() const override { return {.rank = rank_, .size = size_, .sequence = sequence_}; }
  void all_reduce_sum(float* x, size_t n) override;
  void all_reduce_max(float* x, size_t n) override;
  // Every rank's x, added in rank order (the same bits on every rank).
  double sum(double x);
  // The same for each of `values`, in place, in one exchange.
  void sum_each(std::span<double> values);
  // Gathers every rank's `local` (n floats each) into `out` (size · n), in rank order.
  void all_gather(const float* local, size_t n, float* out) override;
  // An all-to-all of the slices, each rank adding the ones it receives in rank order.
  void reduce_scatter_sum(float* x, size_t n, float* out) override;
  void gather_rows(const float* local, size_t n, float* out) override;
  // An all-gather (or under sequence parallelism the all-to-all of reduce_scatter_sum) in the wire
  // dtype, the ranks' rows added in rank order.
  void sum_rows(float* x, size_t N, size_t width, float* local) override;
  bool overlaps() const override { return overlap_ && size_ > 1; }
  void start_sum_rows(float* x, size_t N, size_t width, float* local) override;
  void finish_sum_rows() override;

  // Since the last reset: seconds this rank waited inside the collectives (the exposed
  // communication), seconds the background exchanges ran while it computed (hidden), the
  // collectives called and the bytes this rank sent.
  void reset_counters() { seconds_ = 0, hidden_seconds_ = 0, calls_ = 0, bytes_ = 0; }
  double seconds() const { return seconds_; }
  double hidden_seconds() const { return hidden_seconds_; }
  int calls() const { return calls_; }
  double bytes() const { return bytes_; }

 private:
  // A sum whose exchange has been posted: x's n floats (whole rows, or under a reduce-scatter this
  // rank's slice of each rank's rows) arrive in gathered_; `out` gets the sum.
  struct PendingSum {
    float* x = nullptr;
    size_t n = 0;
    float* out = nullptr;
    bool scatter = false;
  };
  // Posts the exchange of a sum of x (n floats) in the wire dtype.
  PendingSum post_sum(float* x, size_t n, float* out, bool scatter, MPI_Request& request);
  // Adds the arrived values of `sum` into its out, in rank order, and counts the exchange.
  void complete(const PendingSum& sum, double waited);
  void count(size_t values_sent, double waited, size_t value_bytes = sizeof(float));
  template <class Op>
  void reduce(float* x, size_t n, Op op);

  MpiWorld& world_;
  MPI_Comm group_;
  int rank_ = 0, size_ = 1;
  bool sequence_, overlap_;
  kernels::DType wire_;
  std::vector<float> gathered_;  // (size, n) of the reduction in progress
  std::vector<kernels::bf16> staged_, gathered16_;  // on a bf16 wire: this rank's rows, and every rank's
  class BackgroundWait;          // the thread that waits on a started sum's exchange
  std::unique_ptr<BackgroundWait> background_;
  PendingSum started_;           // the sum start_sum_rows posted, until finish_sum_rows
  double seconds_ = 0, hidden_seconds_ = 0, bytes_ = 0;
  int calls_ = 0;
};

// The global gradient norm of a tensor-parallel model whose shard's flat gradient buffer is cut into
// consecutive slices grads[lo, hi) held by the consecutive ranks of `chain` (ZeRO-2 replicas,
// pipeline stages; MPI_COMM_SELF: this rank holds it all): Σ g² of the split tensors chained
// through `chain` and added over the tensor group in rank order, plus the replicated tensors' (the
// same on every rank of the group) once. Every rank of both groups calls it; all get the same bits.
float tensor_grad_norm(MpiWorld& world, MPI_Comm chain, MpiTensorCollectives& group, const ParamTable& table,
                       const float* grads, size_t lo, size_t hi);

// Refuses, with what to do, what tensor parallelism over `ranks` ranks (settings.parallel.tensor
// per group; alone, with data replicas or as a pipeline's stages) does not run: a degree that does
// not divide the ranks, the heads or the hidden units, and a mixture of experts.
void check_tensor_parallel(const RunSettings& settings, int ranks);

class TensorParallelStep final : public StepStrategy {
 public:
  TensorParallelStep(Session& session, MethodSet& methods, const RunSettings& settings, MpiWorld& world);
  ~TensorParallelStep() override;
  const char* name() const override { return name_.c_str(); }
  double tokens_per_step(int64_t step) const override { return StepStrategy::tokens_per_step(step) * replicas(); }
  StepResult run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) override;
  void synchronize() override;
  // Checkpoints are sharded: each rank of the first replica writes its shard (ZeRO: its moments
  // gathered over the replicas around the write).
  CheckpointRole prepare_checkpoint() override;
  void after_checkpoint() override;
  // The shard now, unless ZeRO shards its moments over the replicas (then whole until the first step).
  bool cut_to_parts() override;
  // Over the replicas: each tensor group evaluates with the sharded forward (no gather).
  std::optional<Evaluation> evaluation() override {
    return Evaluation{replica_group_.get(), {replica(), replicas(), {}}};
  }
  // This rank's shard (ZeRO-2: this replica's part of it; the rest takes memory only while reduced).
  size_t resident_gradient_bytes() const override;
  // The shard's plan and its moments (ZeRO: this replica's part), though the session is whole
  // until the first step.
  MemoryPlan memory_plan() const override;
  size_t optimizer_bytes() const override;

 protected:
  void begin_context(TrainContext& ctx) override;  // the replicas share their caches
  void reset_gradients() override;                 // ZeRO-2: other replicas' parts released
  // The replica's micro-batches on every rank of its tensor group; each shard's gradients summed
  // over the replicas; losses added in one process's order; FLOPs summed over every rank.
  void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch, StepResult& r) override;
  float clip_gradients() override;  // split tensors' squares summed over the group, replicated once
  void update(float lr) override;   // ZeRO-1/2: the replicas' updated parts all-gathered
  void add_metrics(nlohmann::json& record) override;  // "comm": seconds inside the collectives
  // With a method that owns masks or reshapes: the whole model on every rank around the event.
  void reconfigure(TrainContext& ctx) override;

 private:
  // Rebuilds the session around this rank's shard (sharded) or the whole model (gathered from
  // every rank's shard); a no-op when it already is. With `gradients`, the step's gradients move
  // along (mid-step, for a method that reads them whole).
  void hold(bool sharded, bool gradients = false);
  int replicas() const { return mesh_->shape().size(Dim::Data); }
  int replica() const { return mesh_->coordinate(Dim::Data); }

  MpiWorld& world_;
  ParamTable shard_table_;  // this rank's shard's
  // parallel.zero: AdamW's moments (1) and the gradients (2) sharded over the D replicas
  std::unique_ptr<ZeroOverReplicas> zero_;
  std::string name_;
  MPI_Comm base_;
  std::unique_ptr<MpiMesh> mesh_;  // data D × tensor T over base_
  std::unique_ptr<MpiTensorCollectives> comm_;
  std::unique_ptr<MpiGroup> replica_group_;  // the data replicas, this rank's tensor coordinate's
  bool sharded_ = false;
  double compute_seconds_ = 0;  // the step's micro-batches
  Timer update_timer_;          // from clipping on
};

}  // namespace frugal::parallel
