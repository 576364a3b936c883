// One optimizer step with the method events around it, as a strategy: the part of the training
// loop shared by `frugal train` and `frugal bench`. The event sequence is written once
// (StepStrategy::run_events): BatchStart, per micro-batch BeforeForward .. AfterBackward, then
// AfterGradReduce, gradient clipping, BeforeOptimStep (sees the clipped gradients and the
// pre-clip norm), the AdamW update, AfterOptimStep, Reconfigure (when a method asked for it) and
// BatchEnd; a strategy (one process here, data parallel and pipelines in parallel/) plugs in the
// pieces between the events: where the micro-batches run and how gradients, losses, the gradient
// norm and the update are combined over processes. Counts the FLOPs executed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/methods/method_set.h"
#include "frugal/session/session.h"
#include "frugal/model/flops.h"
#include "frugal/train/evaluate.h"
#include "frugal/train/process_group.h"
#include "frugal/train/run_config.h"

namespace frugal {

// Fills one micro-batch: inputs (B,T), targets (B,T), sample ids (B).
using BatchSource = std::function<void(int32_t* inputs, int32_t* targets, int64_t* sample_ids)>;

struct StepResult {
  double loss = 0;  // mean over micro-batches
  float grad_norm = 0;
  float lr = 0;     // the learning rate of the update
  PhaseFlops executed, dense;  // model FLOPs of the whole step
  // executed and dense summed over the group's ranks, each of which counted its own part.
  void sum_flops(ProcessGroup& group);
};

// Throws Error, before anything is allocated, when a training step of these settings (the model
// with its vocabulary size resolved, batch, sequence length, recomputation, AdamW's moments)
// needs more memory than the limit; the error gives the estimate, the keys
// that size it, and a tensor × pipeline layout whose ranks would fit. The limit is
// memory_limit_bytes: train.max_memory_mb, or the memory the machine has available when that is less.
void check_memory_available(const RunSettings& settings);
double memory_limit_bytes(const TrainSettings& t);
// The memory plan of the largest rank of a layout of tensor × stages ranks (the costliest stage of
// an even split of the blocks, one micro-batch in flight; 1 and 1: one process), AdamW's moments
// and their sum.
struct RankMemory {
  MemoryPlan plan;
  double optimizer = 0, needed = 0;
};
RankMemory largest_rank_memory(const RunSettings& settings, int tensor, int stages);
// The most the bf16 working copies take beside `plan` under train.precision = "bf16" (every weight
// again in bf16: plan.parameters / 2); 0 in fp32.
double working_copy_bound(const MemoryPlan& plan, const TrainSettings& t);

// The run's horizon: train.max_steps, or under a time budget its fixed steps once the session has
// them (at most train.max_steps).
int64_t run_horizon(const Session& session, const TrainSettings& train);

// The context of `session` at `step` with the run settings methods read (batch, accumulation,
// sequence length, seed, horizon, run directory): what every event's context starts from.
TrainContext run_context(Session& session, const TrainSettings& train, int64_t step);

// How this rank takes part in a checkpoint (StepStrategy::prepare_checkpoint, save_checkpoint).
struct CheckpointRole {
  // The session is this rank's part of a layout (a tensor shard, a pipeline stage or both) and
  // stays so: the writing ranks each write their part (a sharded checkpoint). false: the session
  // is whole and the same on every rank, and rank 0 writes it (AdamW's moments: see its sharding).
  bool sharded = false;
  bool writes = true;  // sharded: false on a data replica whose part another replica writes
};

// How one optimizer step executes: the strategy the trainer and the benchmark run steps through,
// applied from outside the model (torchtitan's lesson). Single process today; data-parallel and
// pipeline strategies (parallel/) implement the same interface: what they change is where the
// micro-batches run and how gradients, losses and the gradient norm are combined.
class StepStrategy {
 public:
  StepStrategy(Session& session, MethodSet& methods, const RunSettings& settings);
  virtual ~StepStrategy() = default;
  virtual const char* name() const = 0;
  // Runs optimizer step `step` (0-based) with the session's learning rate for it, drawing
  // train.grad_accum micro-batches from next_batch; `record` (may be null) is the step's metrics
  // line, which methods add to; a record given an "event" (a string naming it) is always logged,
  // whatever train.log_interval. By default run_events; a strategy that changes its layout
  // between steps (a pipeline) does that around it.
  virtual StepResult run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) {
    return run_events(step, next_batch, record);
  }

  // Bytes of gradients this process holds between steps: the whole buffer, unless the strategy
  // keeps only a shard of it (ZeRO-2).
  virtual size_t resident_gradient_bytes() const { return session_.model().num_floats() * sizeof(float); }
  // The memory plan of the model this process trains with and the bytes of AdamW's moments it
  // keeps (the start-up line): the session's, unless the strategy cuts the session at its first
  // step (tensor parallelism: this rank's shard).
  virtual MemoryPlan memory_plan() const { return session_.model().memory_plan(); }
  virtual size_t optimizer_bytes() const { return session_.optim().state_bytes(); }

  // Tokens optimizer step `step` trains on, over all ranks (the throughput the trainer logs); by
  // default B·T·(its accumulation count: train.grad_accum after the batch warm-up) (one process,
  // or a pipeline, whose grad_accum counts every rank's).
  virtual double tokens_per_step(int64_t step) const;
  // A few words for the trainer's progress line (a pipeline's layout and bubble); may be empty.
  virtual std::string status() const { return {}; }

  // Makes the session whole and the same on every rank (weights and AdamW's moments) where the
  // strategy leaves parts of it with their owners between steps (pipeline stages each update
  // their own blocks): the trainer calls it before evaluating, saving a checkpoint or sampling.
  virtual void synchronize() {}
  // Before the trainer writes a checkpoint: the session as save_checkpoint writes it. By default
  // whole (synchronize()); a strategy whose ranks hold parts of the model may leave them in place
  // and have each write its own (every rank holds its part's AdamW moments whole until
  // after_checkpoint()).
  virtual CheckpointRole prepare_checkpoint() {
    synchronize();
    return {};
  }
  virtual void after_checkpoint() {}
  // Cuts the session to this rank's part now, before its weights are written: at the start of a
  // run (then initialised part by part: GPT::init_weights), or at a resume from a sharded
  // checkpoint of this run's tensor degree after the strategy's and the session's state are loaded
  // (then each rank reads its own part's weights and moments). No rank then ever holds the whole
  // model. Not with methods, which start on the whole model (their Init, their restored state).
  // false: the session stays whole (it is cut at the first step).
  bool enter_parts() { return methods_.empty() && cut_to_parts(); }
  // How the trainer evaluates the session as it is: every rank of `group` runs evaluate_loss with
  // `share`; nullopt (the default): the session is synchronize()d and evaluated over the run's
  // ranks. Tensor parallelism: over its data replicas, each tensor group running the sharded
  // forward; a pipeline of tensor groups: each replica's stages chain their sharded forwards.
  struct Evaluation {
    ProcessGroup* group = nullptr;
    EvalShare share;
  };
  virtual std::optional<Evaluation> evaluation() { return std::nullopt; }
  // The strategy's own state, kept in checkpoints (a pipeline's current layout); null: none.
  virtual nlohmann::json save_state() const { return nullptr; }
  virtual void load_state(const nlohmann::json& /*state*/) {}

  // A context for events outside a step (Init, FitStart, Eval, Checkpoint, FitEnd).
  TrainContext context(int64_t step, nlohmann::json* record = nullptr);
  // The number of distinct training samples, passed to methods (TrainContext::num_samples).
  void set_num_samples(int64_t n) { num_samples_ = n; }

 protected:
  // The step's method events in order, with the strategy's pieces below between them.
  StepResult run_events(int64_t step, const BatchSource& next_batch, nlohmann::json* record);

  // enter_parts() of a strategy whose ranks hold parts of the model (the default: none).
  virtual bool cut_to_parts() { return false; }

  // The pieces a strategy plugs into the sequence.
  // Before BatchStart: what the context needs beyond context() (replicas sharing a cache).
  virtual void begin_context(TrainContext& /*ctx*/) {}
  // After BatchStart: the model ready for the step's micro-batches, its trainable gradients zero.
  virtual void reset_gradients();
  // The step's micro-batches (drawn from next_batch, with their micro-batch events), their
  // gradients combined over the processes: sets r.loss (the mean over every micro-batch of the
  // step) and adds their FLOPs to r.executed and r.dense.
  virtual void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                 StepResult& r) = 0;
  // After AfterGradReduce: clips the gradients to the optimizer's limit (BeforeOptimStep's
  // methods see them clipped) and returns their global norm before clipping. With no methods,
  // the clipping factor may be left to update() instead (grad_scale_).
  virtual float clip_gradients();
  // After BeforeOptimStep: the AdamW update with learning rate lr and the experts' balancing bias
  // (GPT::balance_experts), and whatever makes the updated parameters whole where they are read.
  virtual void update(float lr);
  // Adds the strategy's own fields to a logged step's metrics line.
  virtual void add_metrics(nlohmann::json& /*record*/) {}
  // When a method asked for it after the update: fires Reconfigure, where methods may reshape the
  // session; a strategy whose state depends on the shapes brings it along around that.
  virtual void reconfigure(TrainContext& ctx);

  // Helpers of the pieces.
  // Fills the micro-batch buffers from next_batch.
  void draw(const BatchSource& next_batch);
  // Runs the micro-batch in the buffers, BeforeForward .. AfterBackward, and adds its FLOPs to r;
  // returns its loss. It is micro-batch `index` of the `count` that make optimizer step `step`
  // in the order one process runs them: that keys its dropout masks and scales its gradient.
  double run_micro_batch(TrainContext& ctx, int micro, int64_t step, int index, int count, StepResult& r);
  // Fires BeforeForward for micro-batch `micro` (inputs, targets (B,T), sample ids (B)) and adds
  // its FLOPs to r; returns how many blocks a method's cached prefix covers (0: none), whose
  // output is then ctx.prefix_output.
  int begin_micro_batch(TrainContext& ctx, int micro, const int32_t* inputs, const int32_t* targets,
                        const int64_t* ids, StepResult& r);
  // The dropout key of micro-batch `index` of the `count` that make optimizer step `step`, in the
  // order one process runs them.
  uint64_t dropout_key(int64_t step, int count, int index) const;
  // Stops training with an error saying what to change when the loss or the norm of 0-based step
  // `step` is not finite: before its update, so that no checkpoint of diverged weights replaces a
  // good one. The error names the step as the log does (step + 1, the steps done with it).
  void check_finite(const char* what, double value, int64_t step) const;
  // After the AdamW update: refreshes the formats it left stale, hands the methods the step's executed
  // FLOPs (r.executed), fires AfterOptimStep, Reconfigure (when a method asked for it) and BatchEnd.
  void end_step(TrainContext& ctx, const StepResult& r);

  Session& session_;
  MethodSet& methods_;
  const RunSettings& settings_;
  int64_t num_samples_ = 0;
  float grad_scale_ = 1.0f;  // clipping's factor, when clip_gradients() left it to update()
  std::vector<int32_t> inputs_, targets_;  // the micro-batch (B,T)
  std::vector<int64_t> ids_;               // its sample ids (B)
};

// Every micro-batch, the gradient norm and the update in this process, over the whole model.
class SingleProcessStep final : public StepStrategy {
 public:
  using StepStrategy::StepStrategy;
  const char* name() const override { return "single-process"; }

 protected:
  void run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch, StepResult& r) override;
};

// Builds the step strategy of a run (the trainer's default: SingleProcessStep).
using StepStrategyFactory =
    std::function<std::unique_ptr<StepStrategy>(Session&, MethodSet&, const RunSettings&)>;
std::unique_ptr<StepStrategy> make_single_process_step(Session& session, MethodSet& methods,
                                                       const RunSettings& settings);

}  // namespace frugal
