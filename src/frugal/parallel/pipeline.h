// Pipeline parallelism with PipeTransformer's elastic pipelining, as a step strategy (train/step.h)
// applied to the model from outside. The ranks form `replicas` (D) data-parallel copies of a
// pipeline of K stages (parallel.pipeline_stages): a mesh of data D × pipeline K (mesh.h; rank
// d·K + k is stage k of replica d). Stage k runs blocks
// [bounds[k], bounds[k + 1]) of the model (the first stage with the embeddings and the frozen
// prefix, the last with ln_f, the head and the loss), chosen by AutoPipe from measured unit costs
// (partition.h). The step's train.grad_accum = M micro-batches (over all ranks: the global batch
// is M·B sequences whatever the layout) are split over the replicas, and each replica's pass
// through its stages in a GPipe or 1F1B schedule (parallel.schedule), activations and their
// gradients sent point to point. Losses are one process's with M micro-batches: bit for bit with
// an untied head (a tied head's token-embedding gradient, added from the last stage into the
// first, sums in another order).
//
// Each rank's session holds only its stage's blocks (weights, gradients and AdamW moments; a last
// stage also a tied head's token embedding, which the first stage owns and sends it after each
// update). A re-partition moves the blocks that change owner, with their moments, between the
// ranks (tensor_moves, partition.h); synchronize() (before evaluation, checkpoints and samples)
// gives every rank the whole model the same way, and the next step goes back to the stage. The
// step count, learning rate, frozen prefix and loader position advance identically on every rank
// (each runs the same loop and draws every micro-batch), and are checked at a re-partition.
//
// Methods run on every rank's stage: what they decide per block (2:4 and mst masks, adaptive
// freezing's gradient norms) is decided by the stage that holds the block and shared with the
// others (TrainContext::share_blocks, sum_over_parts); the session keeps the formats and patterns
// they install for every block across re-partitions. A method that may reshape the model (the
// V-cycle) acts on the whole model, gathered on every rank around each Reconfigure where it
// reshapes; after a reshape the pipeline is laid out again for the new model (fewer stages for
// fewer blocks).
//
// When a method freezes blocks (the Reconfigure safe point), the stages are re-balanced and,
// with parallel.elastic, the pipeline is halved while its slowest stage stays no slower than at
// the start (AutoPipe); the freed ranks become data-parallel replicas (AutoDP). A pipeline of one
// stage is data parallelism: the step then runs as DataParallelStep (overlapped bucket
// all-reduce). Per-stage busy time, the bubble and every re-partition go into the metrics.
//
// With parallel.tensor = T > 1 the mesh is data D × pipeline K × tensor T (rank (d·K + k)·T + t,
// mesh.h): each stage is a tensor group of T consecutive ranks, each holding its Megatron shard
// (tensor_parallel.h) of the stage's blocks, and running every micro-batch of the stage together.
// The residual stream between stages is replicated over the group, so tensor rank t of stage k
// sends its activations to tensor rank t of stage k + 1 and its input gradients back (its pipeline
// group): B·S·C floats per rank and micro-batch (S the sequence length), T times that between two
// stages: as many bytes as one send and a broadcast inside the next group, without the
// broadcast's extra hop on the critical path. A tied head's exchanges pair the same tensor ranks of the first and last stage (the same
// vocabulary rows). The gradient norm chains the split and replicated sums through the stages and
// adds the split ones over the group. Blocks move between ranks whole: a re-partition or
// synchronize() gathers each stage's shards first and, unless the model is then whole, cuts them
// again. Such a pipeline needs no synchronize() for evaluation (each replica's stages chain their
// sharded forwards over its share of the batches) nor for checkpoints (each rank of the first
// replica writes its shard of its stage: a sharded checkpoint, train/checkpoint.h), and without
// methods it starts there: the layout is chosen (AutoPipe's measurement included) before any
// weight is written and each rank initialises, or reads from a sharded checkpoint, its stage's
// shard only (enter_parts). Methods act on whole blocks as under tensor parallelism alone: a stage
// gathers its shards around a Reconfigure that may choose masks, and with their gradients for a
// method that reads whole gradients (mst's growth) until the clip; adaptive freezing's per-block
// sums add the shards' parts, then the stages'. AutoDP (parallel.elastic with a freezing method), and a V-cycle
// level short enough to leave one stage, are refused: a one-stage layout is data parallelism
// without tensor shards.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/parallel/data_parallel.h"
#include "frugal/parallel/mpi_mesh.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/parallel/partition.h"
#include "frugal/parallel/tensor_parallel.h"
#include "frugal/train/step.h"

namespace frugal::parallel {

class PipelineStep final : public StepStrategy {
 public:
  PipelineStep(Session& session, MethodSet& methods, const RunSettings& settings, MpiWorld& world);
  ~PipelineStep() override;
  const char* name() const override { return name_.c_str(); }
  StepResult run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) override;
  std::string status() const override { return status_; }
  void synchronize() override;
  // With tensor shards (pipeline × tensor): sharded, each rank of the first replica writing its
  // stage's shard; else the whole model, synchronize()d.
  CheckpointRole prepare_checkpoint() override;
  // With tensor shards: each replica's stages chain their sharded forwards over its share of the
  // batches, the last stage's losses added over every rank (no gather); else synchronize()d.
  std::optional<Evaluation> evaluation() override;
  // With tensor shards: the stage's shard now (the checkpoint's layout applied, or one planned now).
  bool cut_to_parts() override;
  nlohmann::json save_state() const override;
  void load_state(const nlohmann::json& state) override;

  const PipelineLayout& layout() const { return layout_; }

 protected:
  // The pieces of a pipeline's step (more than one stage; StepStrategy::run_events).
  // The first stages' replicas share caches; every stage shares per-block decisions (share_blocks).
  void begin_context(TrainContext& ctx) override;
  void reset_gradients() override;                 // and the stage's activation plan
  // The schedule; the tied head's gradient; the replicas' all-reduce; losses and FLOPs summed.
  void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch, StepResult& r) override;
  float clip_gradients() override;  // the norm chained through the stages
  void update(float lr) override;   // the stage's slice; the tied head's weights sent on
  void add_metrics(nlohmann::json& record) override;  // "pipeline": bubble and busy time per stage
  // With a method that may reshape the model: the whole model on every rank around the event.
  void reconfigure(TrainContext& ctx) override;

 private:
  // One micro-batch of this replica: its tokens, targets and sample ids (B·T, B·T, B).
  struct MicroBatch {
    std::vector<int32_t> inputs, targets;
    std::vector<int64_t> ids;
  };
  int stage() const { return mesh_->coordinate(Dim::Pipeline); }
  int tensor_rank() const { return world_.rank() % tensor_; }
  int groups() const { return world_.size() / tensor_; }  // the ranks of one tensor coordinate
  int replica() const { return mesh_->coordinate(Dim::Data); }
  MPI_Comm pipe() const { return mesh_->group(Dim::Pipeline); }     // this replica's stages
  MPI_Comm replicas() const { return mesh_->group(Dim::Data); }     // this stage's replicas
  // [lo, hi) of this rank's flat buffer that its stage updates.
  std::pair<size_t, size_t> slice() const;
  // The unit costs of one micro-batch, each unit timed on every rank on a model of it alone and
  // averaged (every rank gets the same).
  UnitCosts measure_costs();
  // A stage's cost for the log: "12.3 ms per micro-batch" or "512 MiB held".
  std::string describe_cost(double cost) const;
  // The block range each rank holds under `layout` (the whole model when it has one stage).
  std::vector<BlockRange> ranges(const PipelineLayout& layout) const;
  // Rebuilds this rank's session around next[rank], the blocks that change owner moving between
  // the ranks with their weights and moments (whole: with tensor parallelism the stage's ranks
  // gather their shards first and cut them again after, unless next is the whole model). Every
  // rank calls it with the same `next`.
  void hold(const std::vector<BlockRange>& next);
  void move_blocks(const std::vector<BlockRange>& next);
  // Tensor parallelism: refuses what it does not run (a V-cycle level of `fewest_blocks` that
  // leaves one stage), makes the tensor groups and their collectives.
  void start_tensor_groups(const MethodSet& methods, int fewest_blocks);
  // Rebuilds the session around this rank's tensor shard of its blocks, or gathers them whole
  // (with their gradients too when `gradients`).
  void hold_tensor_shard(bool sharded, bool gradients = false);
  // "pipeline of 2 stages × 1 replica × tensor 2, blocks [0, 2) [2, 4), 1F1B" from a layout's shape
  // and its blocks (once chosen).
  std::string describe_layout(const std::string& shape, const std::string& blocks = "") const;
  // Makes `layout` current: the ranks' blocks, communicators, the stage's activation plan,
  // DataParallelStep for one stage.
  void apply(const PipelineLayout& layout);
  // After a Reconfigure that moved the frozen prefix: AutoPipe + AutoDP.
  void repartition(int64_t step, nlohmann::json* record);
  // The stages of the current model's pipeline: parallel.pipeline_stages, or fewer for a model of
  // fewer blocks (the most that divide the ranks).
  int stages_for(int n_layer) const;
  // The current model's unit costs (measured, or bytes), the starting limit and AutoPipe's layout,
  // made current (apply): at the first step and after a reshape.
  PipelineLayout plan_layout();
  // The first layout, made current: planned (and printed), or the checkpoint's (load_state).
  void start();
  // After a Reconfigure that reshaped the model (held whole on every rank): a pipeline for it.
  void follow_reshape(int64_t step, nlohmann::json* record);
  // The step's metrics of a re-partition from `before` to `next`: what caused it (the frozen
  // prefix, or the reshaped model's blocks) and the new layout.
  void record_repartition(nlohmann::json* record, nlohmann::json cause, const PipelineLayout& before,
                          const PipelineLayout& next, double seconds) const;
  // Whether this stage takes part in a tied head's exchanges of the token embedding (its
  // gradient to the first stage, the updated weights back): the first and the last stage, while
  // the embeddings train.
  bool tied_exchange() const;
  // "; memory plan per stage …": replica 0's stages, for the start-up line.
  std::string describe_stage_plans() const;
  void forward(TrainContext& ctx, int64_t step, int micro, StepResult& r);
  void backward(TrainContext& ctx, int micro);
  int slot_of(int micro) const { return micro % slots_; }
  // TrainContext::share_blocks over this replica's stages.
  void share_blocks(std::span<const int> layers, std::vector<std::string>& blobs);
  // Sends the slot's copy of `data` (B·T·C floats) to pipeline rank `to` after the slot's previous
  // send finished; on a bf16 wire the copy is data rounded to bf16 (in the buffer's first half).
  void send(std::vector<float>& buffer, MPI_Request& request, const float* data, int to, int tag);
  // Receives B·T·C floats into out (on a bf16 wire received as bf16 and widened).
  void receive(float* out, int from, int tag, const std::string& what);
  void wait_sends();

  MpiWorld& world_;
  int tensor_;  // parallel.tensor: each stage a tensor group of T consecutive ranks
  MPI_Comm tensor_group_ = MPI_COMM_NULL;
  std::unique_ptr<MpiTensorCollectives> tensor_comm_;
  bool sharded_ = false;  // the session holds this rank's tensor shard of its blocks
  RunSettings dp_settings_;  // the DataParallelStep's: its grad_accum is per rank
  std::string name_;
  bool gpipe_, elastic_;
  bool balance_parameters_;  // parallel.autopipe_cost = "parameters": costs are bytes held, not seconds
  PipelineLayout layout_;
  UnitCosts costs_;
  bool measured_ = false, applied_ = false;
  std::vector<BlockRange> held_;  // what each rank's session holds
  std::string status_;       // for the progress line
  double limit_ = 0;         // the costliest stage of the starting layout
  int layout_frozen_ = 0;    // the frozen prefix the layout was made for
  int64_t layout_reshapes_ = 0;  // the session's reshape count the layout was made for
  int64_t repartitions_ = 0; // so far in the run
  MPI_Comm base_ = MPI_COMM_NULL;
  std::unique_ptr<MpiMesh> mesh_;  // the layout's data × pipeline mesh over base_
  std::unique_ptr<DataParallelStep> dp_;  // one stage: data parallel
  int slots_ = 1, per_replica_ = 1;       // activation slots; micro-batches per replica
  std::vector<MicroBatch> micro_;         // this replica's micro-batches of the step
  std::vector<double> losses_;            // the last stage's, per micro-batch
  std::vector<float> act_in_, grad_in_;   // received (B,T,C)
  std::vector<float> head_grad_;          // first stage: a piece of a tied head's token-embedding gradient
  std::vector<kernels::bf16> staged_;     // the replicas' gradient sum on a bf16 wire (parallel/wire.h)
  kernels::DType wire_;                   // parallel.comm_dtype: the stages' activations and gradients too
  std::vector<kernels::bf16> received_;   // a message of the stages on a bf16 wire
  std::vector<std::vector<float>> act_out_, grad_out_;  // per slot: being sent
  std::vector<MPI_Request> act_sends_, grad_sends_;
  double busy_ = 0;  // seconds of compute in the step's schedule
  double bytes_sent_ = 0;  // the step's activations and input gradients sent (after the step: every rank's)
  // Per rank: the step's busy and schedule seconds, the floats its session holds.
  std::vector<double> rank_busy_, rank_schedule_, rank_floats_;
  size_t lo_ = 0, hi_ = 0;  // the step's trainable slice of this stage's flat buffer
  size_t stage_activation_bytes_ = 0;  // this rank's stage, all slots
  std::vector<double> stage_plan_bytes_;  // every rank's memory plan (weights, gradients, moments, activations)
};

}  // namespace frugal::parallel
