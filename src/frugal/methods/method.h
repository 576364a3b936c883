// The method plugin contract (Composer-style two-way callbacks). A training-acceleration method
// is told about every event of the training loop and may act on what is trained through a narrow
// interface: the session (session/session.h: the model, the optimizer's moments, the LR schedule,
// and a reshape of the model), the frozen prefix, linear formats (sparse kernels), cached prefix
// activations, and metrics. Shapes, formats and partitions change only at the Reconfigure safe
// point (after the optimizer step, all ranks at a barrier). See docs/methods.md.
#pragma once
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/io/config.h"
#include "frugal/session/session.h"

namespace frugal {

// In the order the trainer fires them. Per optimizer step: BatchStart, then per micro-batch
// BeforeForward, AfterForward, BeforeBackward, AfterBackward; then AfterGradReduce, gradient
// clipping, BeforeOptimStep (clipped gradients; ctx.grad_norm is the norm before clipping), the
// AdamW update, AfterOptimStep, Reconfigure (only when a method asked for it), BatchEnd.
// Eval around each evaluation, Checkpoint before each checkpoint is written.
enum class Event {
  Init, FitStart, BatchStart, BeforeForward, AfterForward, BeforeBackward, AfterBackward,
  AfterGradReduce, BeforeOptimStep, AfterOptimStep, Reconfigure, BatchEnd, Eval, Checkpoint, FitEnd
};
inline constexpr int kNumEvents = static_cast<int>(Event::FitEnd) + 1;
const char* event_name(Event e);

// What a method may change. MethodSet refuses, at start-up, a method that changes shapes next to
// one whose state is tied to the shapes (masks, a frozen prefix with its cached activations), and
// stops a run whose method reshapes the session without declaring it.
struct Capabilities {
  bool changes_trainable_set = false;  // frozen prefix (optimizer range, FLOP accounting)
  bool changes_shapes = false;         // reshapes the session at Reconfigure (Session::reshape)
  bool owns_masks = false;             // installs linear formats / sparsity masks
  // With owns_masks: re-derives its masks and formats for the new shapes at the Reconfigure of a
  // reshape; with changes_trainable_set: starts its frozen prefix again on the new shapes. It
  // fires after the reshaping method, so it may run next to a changes_shapes method.
  bool follows_reshape = false;
  // Reads gradients of the whole model after their reduction (AfterGradReduce and later); a
  // data-parallel run with ZeRO stage 2 leaves each rank only its shard's.
  bool reads_all_gradients = false;
  // With reads_all_gradients: only per-block sums over them, added over the ranks that hold
  // parts of a block (TrainContext::sum_over_parts), so a tensor-parallel shard serves it.
  bool gradient_sums_only = false;
  // With changes_shapes: the fewest blocks the model has at any point of the run (a pipeline
  // needs at least one per stage); 0: the configured model's.
  int fewest_blocks = 0;
  // With changes_trainable_set: the most blocks it may freeze (a fixed-length pipeline needs a
  // trainable block per stage); -1: all but one.
  int most_frozen = -1;
  // Its schedule follows TrainContext::max_steps from step to step, so it runs under a time budget
  // (train.budget = "seconds"), whose horizon is fixed after the first timed steps and may be
  // fixed again later (Method::step_plan).
  bool follows_horizon = false;
};

// How a method's steps differ in cost over a run of `horizon` steps, for a time budget that fixes
// the horizon from timed steps: consecutive spans, span i ending before ends[i] (the last at the
// horizon) and made of steps of kind kinds[i]. A kind's steps all cost about the same time; kind 0
// is a step of the configured model. Until a kind's steps are timed, a step of kind k is taken to
// cost estimated_cost[k] times a kind-0 step. names[k] says what kind k is, for messages.
struct StepPlan {
  std::vector<int64_t> ends;
  std::vector<int> kinds;
  std::vector<double> estimated_cost;
  std::vector<std::string> names;
};

// The view of training a method gets at each event. Fields are valid as noted.
struct TrainContext {
  Session& session;
  // The session's current model and optimizer (a reshape replaces them: do not keep references
  // across a Reconfigure).
  GPT& model() const { return session.model(); }
  AdamW& optim() const { return session.optim(); }
  int64_t step = 0;       // 0-based index of the current optimizer step
  // The run's horizon: train.max_steps, or a time budget's steps once they are fixed (they may be
  // fixed again at a later step: Capabilities::follows_horizon).
  int64_t max_steps = 0;
  int micro = 0;          // micro-batch index (BeforeForward .. AfterBackward)
  int batch = 0;          // B
  int grad_accum = 1;     // micro-batches per optimizer step
  int seq_len = 0;        // T
  uint64_t seed = 0;      // train.seed
  std::string_view run_dir;  // train.out_dir: where a method keeps its files
  int64_t num_samples = 0;  // distinct training sample ids (one epoch); 0: unknown (bench)
  const int32_t* inputs = nullptr;      // (B,T) current micro-batch
  const int32_t* targets = nullptr;     // (B,T)
  const int64_t* sample_ids = nullptr;  // (B) stable ids of the micro-batch's sequences
  float loss = 0;                       // after AfterForward: the micro-batch loss
  float grad_norm = 0;                  // from BeforeOptimStep: the gradient norm before clipping
  double step_flops = 0;                // from AfterOptimStep: the step's executed model FLOPs (all ranks)
  // Set at BeforeForward to feed cached activations: the output of the first `prefix_blocks`
  // blocks for the whole micro-batch (B,T,C); the trainer passes it to GPT::forward.
  const float* prefix_output = nullptr;
  int prefix_blocks = 0;
  // Set during the micro-batch events by a strategy that runs `replicas` data-parallel copies in
  // lockstep (null in one process): gathers `bytes` from every replica into `all` (replicas ×
  // bytes, in replica order). A collective: every replica calls it at the same event of the same
  // micro-batch, or none does; also set at BatchEnd. AutoCache shares the prefix outputs it
  // stored during the step, so that a sample revisited on another replica is served there too.
  std::function<void(const void* mine, size_t bytes, void* all)> allgather_replicas;
  int replicas = 1;
  // With allgather_replicas: the replicas' forwards meet inside the model (expert parallelism's
  // token exchanges), so a micro-batch may skip a block's forward only where every replica skips it.
  bool replicas_in_lockstep = false;
  // Set by a strategy whose ranks each hold part of the model (null when every rank's model is
  // whole): collectives over the ranks that together hold one copy of it, every one of which calls
  // them at the same event, or none does.
  // share_blocks (a pipeline's stages): blobs[i] is block layers[i]'s; the entries of the blocks
  // this rank's model holds stay, the others become their holder's (a mask a stage chose from its
  // weights reaches every rank).
  // sum_over_parts (a pipeline's stages, a tensor group): every value summed over those ranks,
  // each adding the part of the model it holds (0 for blocks it does not hold; a tensor that every
  // rank of a tensor group holds whole is added by its rank 0 only), e.g. per-block gradient sums
  // of squares.
  std::function<void(std::span<const int> layers, std::vector<std::string>& blobs)> share_blocks;
  std::function<void(std::span<double> values)> sum_over_parts;
  bool request_reconfigure = false;  // set by a method to get a Reconfigure event after this step
  // At Reconfigure (match and apply): a method that fired before this one reshaped the session in
  // this event; a follows_reshape method re-derives its state for the new shapes.
  bool reshaped = false;
  nlohmann::json* metrics = nullptr; // the current step's log record; methods add their keys
};

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const { return {}; }
  // Names of methods this one must run before, at every event.
  virtual std::vector<std::string> runs_before() const { return {}; }
  virtual bool match(Event event, const TrainContext& ctx) const = 0;
  virtual void apply(Event event, TrainContext& ctx) = 0;
  // The method's resumable state, stored in every checkpoint.
  virtual nlohmann::json save_state() const { return nlohmann::json::object(); }
  virtual void load_state(const nlohmann::json& state) {}
  // A resume whose checkpoint was trained without this method (it was added to the config) starts
  // it at the resumed step, with no state: "" when that is the method's meaning too (it starts
  // from the current weights and counts its schedule from its own start), otherwise why not (its
  // schedule is laid out from step 0), and the resume is refused.
  virtual std::string cannot_start_mid_run() const {
    return "it has no state to start from at a resumed step";
  }
  // Resumable state too large for JSON (a saved copy of the model), as named float tensors; the
  // views stay valid until the next event. Stored in the checkpoint's methods.safetensors and
  // handed back, before load_state, on resume.
  using StateTensors = std::vector<std::pair<std::string, std::span<const float>>>;
  virtual StateTensors state_tensors() const { return {}; }
  virtual void load_state_tensors(std::map<std::string, std::vector<float>> tensors) {}
  // FLOP accounting: true when blocks [0, k) run no forward this step (cached activations).
  virtual int cached_prefix_blocks() const { return 0; }
  // Under a time budget, after FitStart: the cost of its steps over a run of `horizon` steps
  // (StepPlan); empty when every step costs the same.
  virtual std::optional<StepPlan> step_plan(int64_t horizon) const { return std::nullopt; }
  // Inference from a checkpoint (eval, sample, export; the weights --init-from starts from): the
  // methods of the checkpoint's config get Init, then their saved state (load_state_tensors,
  // load_state), then this call instead of any training event, with ctx.step the checkpoint's
  // step. The method installs on ctx.model() what shaped the function it was training at that
  // point (masks as linear formats, attention patterns), checks that the model is what its state
  // expects (Error with the reason and what to do otherwise), and returns one line for the user
  // saying what the model computes beyond its dense causal weights at their shape (empty: nothing).
  virtual std::string restore_trained_function(TrainContext& ctx) { return {}; }
  // When a run ends (not by a signal) with this method's plan unfinished in a way that changes
  // what the checkpoint holds (the V-cycle cut short on a coarse level): one line for the user
  // saying so and what to do; empty otherwise.
  virtual std::string unfinished_at_end() const { return {}; }
};

// A registered method: its config keys (under "methods.<name>.") and its factory. A method is
// enabled by the presence of its [methods.<name>] table.
struct MethodInfo {
  std::string name;
  std::string description;
  void (*add_keys)(io::ConfigSchema& schema, const std::string& prefix);
  std::unique_ptr<Method> (*make)(const io::Config& config, const std::string& prefix);
  // Other methods it cannot run with, and why.
  std::vector<std::pair<std::string, std::string>> conflicts;
};

// Every method frugal knows, in registration order (methods/registry.cpp).
const std::vector<MethodInfo>& registered_methods();
// Adds a method defined outside the library (a program's own, a test's) to the list; call it before
// the first run config is built (run_schema() reads the list). Throws Error for a taken name.
void register_method(MethodInfo info);

}  // namespace frugal
