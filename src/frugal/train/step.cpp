// One training step with events; see step.h.
#include "frugal/train/step.h"

#include <algorithm>
#include <cmath>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/rng.h"

namespace frugal {

double working_copy_bound(const MemoryPlan& plan, const TrainSettings& t) {
  return linear_dtype(t) == kernels::DType::BF16 ? plan.parameters / 2.0 : 0.0;
}

double memory_limit_bytes(const TrainSettings& t) {
  const double available = static_cast<double>(available_memory_bytes());
  return t.max_memory_mb > 0 ? std::min(available, t.max_memory_mb * 1024 * 1024) : available;
}

RankMemory largest_rank_memory(const RunSettings& settings, int tensor, int stages) {
  const ModelConfig& m = settings.model;
  const TrainSettings& t = settings.train;
  const ShardCoord shard{.rank = 0, .size = tensor, .sequence = settings.parallel.sequence};
  const int L = m.n_layer, K = std::clamp(stages, 1, L);
  RankMemory worst;
  for (int k = 0; k < K; ++k) {
    const BlockRange range{k * L / K, (k + 1) * L / K, k == 0, k == K - 1};
    // One micro-batch in flight: a pipeline checks its stages with theirs once it has laid them out.
    const MemoryPlan plan = GPT::estimate_memory(m, t.batch_size, t.seq_len, recompute_blocks(t.recompute, L), range,
                                                 range, 1, shard, linear_dtype(t));
    const double optimizer = 2.0 * plan.parameters;  // AdamW's m and v
    const double needed = optimizer + plan.parameters + plan.gradients + plan.activations + plan.scratch +
                          working_copy_bound(plan, t);
    if (needed > worst.needed) worst = {plan, optimizer, needed};
  }
  return worst;
}

namespace {

// "parallel.tensor = 2 × parallel.pipeline_stages = 2 (mpirun -np 4, N MiB per rank)": the layout of
// the fewest ranks (a power of two up to 64) whose largest rank fits `limit`, or "" when none does.
// `model_state`: the whole model's weights, gradients and moments; a layout of R ranks holds at
// least 1/R of them per rank, so the layouts that cannot fit are not planned.
std::string fitting_layout(const RunSettings& settings, double limit, double model_state) {
  const ModelConfig& m = settings.model;
  for (int ranks = 2; ranks <= 64; ranks *= 2)
    for (int tensor = 1; tensor <= ranks && model_state / ranks <= limit; tensor *= 2) {
      const int stages = ranks / tensor;
      if (stages * tensor != ranks || stages > m.n_layer || (tensor > 1 && m.moe.experts > 0)) continue;
      if (m.n_head % tensor != 0) continue;
      try {
        LocalSizes::of(m, {0, tensor});
      } catch (const Error&) {
        continue;  // the hidden units do not divide
      }
      const double needed = largest_rank_memory(settings, tensor, stages).needed;
      if (needed <= limit)
        return fmt::format("parallel.tensor = {} × parallel.pipeline_stages = {} (mpirun -np {}{}) plans {:.1f} "
                           "MiB for its largest rank", tensor, stages, ranks,
                           stages > 1 ? ", parallel.elastic = false" : "", needed / (1024.0 * 1024.0));
    }
  return "";
}

}  // namespace

void check_memory_available(const RunSettings& settings) {
  const ModelConfig& m = settings.model;
  const TrainSettings& t = settings.train;
  // Under tensor parallelism each rank holds a shard (the largest: rank 0's), under sequence
  // parallelism its rows of the residual stream, and in a pipeline its stage (the costliest of an
  // even split; the pipeline checks the stages it lays out again).
  const int tensor = settings.parallel.tensor, stages = settings.parallel.pipeline_stages;
  const RankMemory rank = largest_rank_memory(settings, tensor, stages);
  const double limit = memory_limit_bytes(t);
  if (rank.needed <= limit) return;
  const MemoryPlan whole = largest_rank_memory(settings, 1, 1).plan;
  const std::string layout = fitting_layout(settings, limit, 4.0 * double(whole.parameters));
  fail("this run needs more memory than {}: {}{} (model.n_layer = {}, model.n_embd = {}, model.vocab_size = {}, "
       "model.block_size = {}, train.batch_size = {}, train.seq_len = {}), {:.1f} MiB {}; make the model or the "
       "batch smaller, or set train.recompute = \"all\" to keep fewer activations{}",
       t.max_memory_mb > 0 ? fmt::format("train.max_memory_mb = {} allows", t.max_memory_mb) : "the machine has",
       rank.plan.describe(static_cast<size_t>(std::min(rank.optimizer, 0x1p63))),
       tensor * stages > 1 ? fmt::format(" per rank of parallel.tensor = {} × parallel.pipeline_stages = {}", tensor,
                                         stages) : "",
       m.n_layer, m.n_embd, m.vocab_size, m.block_size, t.batch_size, t.seq_len, limit / (1024.0 * 1024.0),
       t.max_memory_mb > 0 && limit < t.max_memory_mb * 1024 * 1024 ? "available (below train.max_memory_mb)"
                                                                    : t.max_memory_mb > 0 ? "allowed" : "available",
       layout.empty() ? "" : ", or split it over more ranks: " + layout);
}

StepStrategy::StepStrategy(Session& session, MethodSet& methods, const RunSettings& settings)
    : session_(session), methods_(methods), settings_(settings) {
  const size_t N = size_t(settings.train.batch_size) * settings.train.seq_len;
  inputs_.resize(N);
  targets_.resize(N);
  ids_.resize(settings.train.batch_size);
}

int64_t run_horizon(const Session& session, const TrainSettings& t) {
  const std::optional<TimeBudget>& budget = session.time_budget();
  return t.budget == "seconds" && budget ? std::min(t.max_steps, budget->steps) : t.max_steps;
}

TrainContext run_context(Session& session, const TrainSettings& t, int64_t step) {
  TrainContext ctx{session};
  ctx.step = step;
  ctx.max_steps = run_horizon(session, t);
  ctx.batch = t.batch_size;
  ctx.grad_accum = t.accum_at(step);
  ctx.seq_len = t.seq_len;
  ctx.seed = t.seed;
  ctx.run_dir = t.out_dir;
  return ctx;
}

TrainContext StepStrategy::context(int64_t step, nlohmann::json* record) {
  TrainContext ctx = run_context(session_, settings_.train, step);
  ctx.num_samples = num_samples_;
  ctx.metrics = record;
  return ctx;
}

double StepStrategy::tokens_per_step(int64_t step) const {
  const TrainSettings& t = settings_.train;
  return double(t.batch_size) * t.seq_len * t.accum_at(step);
}

void StepStrategy::draw(const BatchSource& next_batch) { next_batch(inputs_.data(), targets_.data(), ids_.data()); }

double StepStrategy::run_micro_batch(TrainContext& ctx, int micro, int64_t step, int index, int count,
                                     StepResult& r) {
  GPT& model = session_.model();
  const int cached = begin_micro_batch(ctx, micro, inputs_.data(), targets_.data(), ids_.data(), r);
  ctx.loss = model.forward(inputs_.data(), targets_.data(), 1.0f / count, dropout_key(step, count, index),
                           ctx.prefix_output, cached);
  methods_.fire(Event::AfterForward, ctx);
  methods_.fire(Event::BeforeBackward, ctx);
  model.backward();
  methods_.fire(Event::AfterBackward, ctx);
  return ctx.loss;
}

int StepStrategy::begin_micro_batch(TrainContext& ctx, int micro, const int32_t* inputs, const int32_t* targets,
                                    const int64_t* ids, StepResult& r) {
  const TrainSettings& t = settings_.train;
  ctx.micro = micro;
  ctx.inputs = inputs;
  ctx.targets = targets;
  ctx.sample_ids = ids;
  ctx.prefix_output = nullptr;
  ctx.prefix_blocks = 0;
  methods_.fire(Event::BeforeForward, ctx);
  const int cached = ctx.prefix_output ? ctx.prefix_blocks : 0;
  const StepFlops flops = count_step_flops(session_.model(), t.batch_size, t.seq_len, cached);
  r.executed += flops.executed_total();
  r.dense += flops.dense_total();
  return cached;
}

uint64_t StepStrategy::dropout_key(int64_t step, int count, int index) const {
  return mix64(settings_.train.seed ^ mix64(static_cast<uint64_t>(step * count + index)));
}

void StepResult::sum_flops(ProcessGroup& group) {
  const std::vector<double> flops = group.sum({executed.forward, executed.backward_input, executed.backward_weight,
                                               executed.optimizer, dense.forward, dense.backward_input,
                                               dense.backward_weight, dense.optimizer});
  executed = {flops[0], flops[1], flops[2], flops[3]};
  dense = {flops[4], flops[5], flops[6], flops[7]};
}

void StepStrategy::check_finite(const char* what, double value, int64_t step) const {
  // Numbered as the log and the checkpoints number the steps done: 0-based step s is "step s + 1".
  FRUGAL_CHECK(std::isfinite(value), "the training {} became {} at step {}/{}, before its update: the "
               "weights are those after step {}, and nothing of step {} was applied or saved; lower "
               "optim.lr or raise optim.warmup_steps", what, value, step + 1, settings_.train.max_steps,
               step, step + 1);
}

void StepStrategy::end_step(TrainContext& ctx, const StepResult& r) {
  // Only what the update left stale: refresh_formats() would round again the bf16 working copies
  // the update wrote (GPT::update_params), a pass over the weights a step.
  session_.model().prepare_formats();
  ctx.step_flops = r.executed.model();
  methods_.fire(Event::AfterOptimStep, ctx);
  if (ctx.request_reconfigure) reconfigure(ctx);
  methods_.fire(Event::BatchEnd, ctx);
}

void StepStrategy::reconfigure(TrainContext& ctx) { methods_.fire(Event::Reconfigure, ctx); }

std::unique_ptr<StepStrategy> make_single_process_step(Session& session, MethodSet& methods,
                                                       const RunSettings& settings) {
  return std::make_unique<SingleProcessStep>(session, methods, settings);
}

StepResult StepStrategy::run_events(int64_t step, const BatchSource& next_batch, nlohmann::json* record) {
  TrainContext ctx = context(step, record);
  begin_context(ctx);
  methods_.fire(Event::BatchStart, ctx);
  reset_gradients();
  StepResult r;
  r.lr = session_.lr(step);
  run_micro_batches(ctx, step, next_batch, r);
  check_finite("loss", r.loss, step);
  methods_.fire(Event::AfterGradReduce, ctx);
  r.grad_norm = ctx.grad_norm = clip_gradients();
  check_finite("gradient norm", r.grad_norm, step);
  methods_.fire(Event::BeforeOptimStep, ctx);
  update(r.lr);
  if (record) add_metrics(*record);
  end_step(ctx, r);
  return r;
}

void StepStrategy::reset_gradients() { session_.model().zero_grad(); }

float StepStrategy::clip_gradients() {
  GPT& model = session_.model();
  AdamW& optim = session_.optim();
  const float norm = AdamW::grad_norm(model.grads(), model.trainable_begin(), optim.model_floats());
  // With no method to read the clipped gradients, the update scales them as it reads them: a pass
  // over the gradients less, the same parameters bit for bit.
  if (methods_.empty() && optim.folds_clip_scale())
    grad_scale_ = optim.clip_scale(norm);
  else
    optim.clip_to(model.grads(), model.trainable_begin(), norm);
  return norm;
}

void StepStrategy::update(float lr) {
  GPT& model = session_.model();
  // the bf16 working copies of a bf16 model are written by the update (GPT::update_params)
  model.update_params([&](float* params, const std::vector<WorkingCopy>& copies) {
    session_.optim().update(params, model.grads(), model.trainable_begin(), lr, 0, copies, grad_scale_);
  });
  grad_scale_ = 1.0f;
  model.balance_experts();
}

void SingleProcessStep::run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                          StepResult& r) {
  const int A = settings_.train.accum_at(step);
  for (int micro = 0; micro < A; ++micro) {
    draw(next_batch);
    r.loss += run_micro_batch(ctx, micro, step, micro, A, r);
  }
  r.loss /= A;
}

}  // namespace frugal
