// One training step with events; see step.h.
#include "frugal/train/step.h"

#include <algorithm>
#include <cmath>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/rng.h"

namespace frugal {

void check_memory_available(const RunSettings& settings) {
  const ModelConfig& m = settings.model;
  const TrainSettings& t = settings.train;
  const MemoryPlan plan =
      GPT::estimate_memory(m, t.batch_size, t.seq_len, recompute_blocks(t.recompute, m.n_layer));
  const double optimizer = 2.0 * plan.parameters;  // AdamW's m and v
  const double needed = optimizer + plan.parameters + plan.gradients + plan.activations + plan.scratch;
  const double available = static_cast<double>(available_memory_bytes());
  FRUGAL_CHECK(needed <= available, "this run needs more memory than the machine has: {} (model.n_layer "
               "= {}, model.n_embd = {}, model.vocab_size = {}, model.block_size = {}, train.batch_size "
               "= {}, train.seq_len = {}), {:.1f} MiB available; make the model or the batch smaller, "
               "or set train.recompute = \"all\" to keep fewer activations",
               plan.describe(static_cast<size_t>(std::min(optimizer, 0x1p63))), m.n_layer, m.n_embd,
               m.vocab_size, m.block_size, t.batch_size, t.seq_len, available / (1024.0 * 1024.0));
}

StepRunner::StepRunner(GPT& model, AdamW& optim, MethodSet& methods, const RunSettings& settings)
    : model_(model), optim_(optim), methods_(methods), settings_(settings) {
  const size_t N = size_t(settings.train.batch_size) * settings.train.seq_len;
  inputs_.resize(N);
  targets_.resize(N);
  ids_.resize(settings.train.batch_size);
}

TrainContext StepRunner::context(int64_t step, nlohmann::json* record) {
  TrainContext ctx{model_, optim_};
  ctx.seq_len = settings_.train.seq_len;
  ctx.grad_accum = settings_.train.grad_accum;
  ctx.seed = settings_.train.seed;
  ctx.out_dir = settings_.train.out_dir;
  ctx.step = step;
  ctx.max_steps = settings_.train.max_steps;
  ctx.batch = settings_.train.batch_size;
  ctx.num_samples = num_samples_;
  ctx.metrics = record;
  return ctx;
}

StepResult StepRunner::run(int64_t step, float lr, const BatchSource& next_batch, nlohmann::json* record) {
  const TrainSettings& t = settings_.train;
  TrainContext ctx = context(step, record);
  methods_.fire(Event::BatchStart, ctx);
  model_.zero_grad();
  StepResult r;
  for (int micro = 0; micro < t.grad_accum; ++micro) {
    next_batch(inputs_.data(), targets_.data(), ids_.data());
    ctx.micro = micro;
    ctx.inputs = inputs_.data();
    ctx.targets = targets_.data();
    ctx.sample_ids = ids_.data();
    ctx.prefix_output = nullptr;
    ctx.prefix_blocks = 0;
    methods_.fire(Event::BeforeForward, ctx);
    const int cached = ctx.prefix_output ? ctx.prefix_blocks : 0;
    const StepFlops flops = count_step_flops(model_, t.batch_size, t.seq_len, cached);
    r.executed += flops.executed_total();
    r.dense += flops.dense_total();
    const uint64_t dropout_key = mix64(t.seed ^ mix64(static_cast<uint64_t>(step * t.grad_accum + micro)));
    ctx.loss = model_.forward(inputs_.data(), targets_.data(), 1.0f / t.grad_accum, dropout_key,
                              ctx.prefix_output, ctx.prefix_blocks);
    r.loss += ctx.loss;
    methods_.fire(Event::AfterForward, ctx);
    methods_.fire(Event::BeforeBackward, ctx);
    model_.backward();
    methods_.fire(Event::AfterBackward, ctx);
  }
  r.loss /= t.grad_accum;
  // A non-finite loss or gradient stops training before the update: the weights stay finite, so
  // no checkpoint of diverged weights replaces a good one.
  auto check_finite = [&](const char* what, double value) {
    FRUGAL_CHECK(std::isfinite(value), "the training {} became {} at step {}; lower optim.lr or "
                 "raise optim.warmup_steps", what, value, step);
  };
  check_finite("loss", r.loss);
  methods_.fire(Event::AfterGradReduce, ctx);
  const size_t begin = model_.trainable_begin();
  r.grad_norm = ctx.grad_norm = optim_.clip(model_.grads(), begin);
  check_finite("gradient norm", r.grad_norm);
  methods_.fire(Event::BeforeOptimStep, ctx);
  optim_.update(model_.params(), model_.grads(), begin, lr);
  model_.refresh_formats();
  methods_.fire(Event::AfterOptimStep, ctx);
  if (ctx.request_reconfigure) methods_.fire(Event::Reconfigure, ctx);
  methods_.fire(Event::BatchEnd, ctx);
  return r;
}

}  // namespace frugal
