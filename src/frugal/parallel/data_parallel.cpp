// The data-parallel step; see data_parallel.h.
#include "frugal/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/ops.h"
#include "frugal/parallel/grad_norm.h"
#include "frugal/parallel/zero.h"

namespace frugal::parallel {
DataParallelStep::DataParallelStep(Session& session, MethodSet& methods, const RunSettings& settings,
                                   MpiWorld& world)
    : StepStrategy(session, methods, settings), world_(world), zero_(settings.parallel.zero),
      base_(world.new_communicator()),
      mesh_(std::make_unique<MpiMesh>(MeshShape::data_pipeline(world.size(), 1), base_)) {
  // Every rank reshapes its whole model alike at Reconfigure (the same weights, the same map);
  // each step reduces the buffer the model has then, and ZeRO re-cuts its shards (reconfigure).
  shards_ = zero_shard_bounds(session.model().table(), world.size(), settings.optim.muon.enabled);
  if (zero_ >= 1) session.shard_optimizer(shards_[replica()], shards_[replica() + 1]);
  // ZeRO-2 releases the other shards' gradient pages every step (GradientReducer) and takes them
  // again in the next backward: in huge pages, that costs 512 times fewer page faults.
  if (zero_ == 2) prefer_huge_pages(session.model().grads(), sizeof(float) * session.model().num_floats());
  const size_t bucket_floats = static_cast<size_t>(settings.parallel.bucket_mb * 1024 * 1024 / sizeof(float));
  reducer_ = std::make_unique<GradientReducer>(world, bucket_floats, comm_dtype(settings.parallel));
}

DataParallelStep::~DataParallelStep() {
  mesh_.reset();
  MPI_Comm_free(&base_);
}

const char* DataParallelStep::name() const {
  static const char* names[] = {"data-parallel", "data-parallel, ZeRO-1", "data-parallel, ZeRO-2"};
  return names[zero_];
}

size_t DataParallelStep::resident_gradient_bytes() const {
  if (zero_ < 2) return StepStrategy::resident_gradient_bytes();
  return (shards_[replica() + 1] - shards_[replica()]) * sizeof(float);
}

void DataParallelStep::begin_context(TrainContext& ctx) {
  ctx.allgather_replicas = world_.allgather_over(replicas());
  ctx.replicas = world_.size();
}

void DataParallelStep::reconfigure(TrainContext& ctx) {
  if (!methods_.acts_now(Event::Reconfigure, ctx, &Capabilities::changes_shapes)) return StepStrategy::reconfigure(ctx);
  // Under ZeRO the reshape's map needs the whole moments: every rank gathers them, the methods
  // reshape, and the new buffer is cut again (its moments copied out of the whole ones).
  if (zero_ >= 1) gather_moments(world_, replicas(), shards_, session_);
  StepStrategy::reconfigure(ctx);
  shards_ = zero_shard_bounds(session_.model().table(), world_.size(), settings_.optim.muon.enabled);
  if (zero_ >= 1) cut_moments(session_, shards_[replica()], shards_[replica() + 1]);
}

void DataParallelStep::reset_gradients() {
  if (zero_ < 2) return StepStrategy::reset_gradients();
  GPT& model = session_.model();
  zero_keeping_shard(model.grads(), model.trainable_begin(), model.num_floats(), shards_[replica()],
                     shards_[replica() + 1]);
}

void DataParallelStep::run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                         StepResult& r) {
  const int A = settings_.train.accum_at(step), N = world_.size(), rank = replica();
  const int count = N * A;  // micro-batches in the step, over all ranks
  GPT& model = session_.model();
  const size_t begin = model.trainable_begin(), total = model.num_floats();
  Timer timer;
  // The global batch in one-process order: rank r's micro-batches are r·A .. r·A + A − 1; the
  // others' are drawn and dropped, so every rank's loader stays at the same position.
  for (int skipped = 0; skipped < rank * A; ++skipped) draw(next_batch);
  // The token embedding (at the bottom of the buffer) would be final only at the very end of the
  // backward; its dense part (a tied head's gradient) is reduced from the first hook on instead,
  // and the embedding rows of every rank are added after the backward (add_embedding_grads).
  const bool defer_wte = begin == 0;
  const auto [wte_begin, wte_end] = model.token_embedding_range();
  std::vector<double> losses(A);
  for (int micro = 0; micro < A; ++micro) {
    draw(next_batch);
    if (micro == A - 1) {  // the gradients are final in the last backward: reduce as they come
      reducer_->begin(model.grads(), defer_wte ? wte_end : begin, total,
                      zero_ == 2 ? GradientReducer::Mode::ReduceScatter : GradientReducer::Mode::AllReduce,
                      shards_);
      bool wte_launched = !defer_wte;
      model.set_grad_ready_hook([&, wte_begin = wte_begin, wte_end = wte_end](size_t from) {
        if (!wte_launched) reducer_->launch_range(wte_begin, wte_end);
        wte_launched = true;
        reducer_->ready(from);
      });
      model.set_defer_token_embedding_grad(defer_wte);
    }
    losses[micro] = run_micro_batch(ctx, micro, step, rank * A + micro, count, r);
  }
  model.set_grad_ready_hook(nullptr);
  model.set_defer_token_embedding_grad(false);
  for (int skipped = (rank + 1) * A; skipped < count; ++skipped) draw(next_batch);
  compute_seconds_ = timer.seconds();
  wait_seconds_ = reducer_->finish();
  if (defer_wte) add_embedding_grads(model);
  // ZeRO-2 leaves each rank its shard's sums; a method reading every block's gradients at this
  // step (mst's topology update, adaptive freezing) gets them whole, for this step only.
  if (zero_ == 2 && methods_.reads_all_gradients_now(ctx)) allgather_shards(model.grads(), begin);

  add_ranks_results(world_, losses, model, r);
}

float DataParallelStep::clip_gradients() {
  update_timer_.reset();
  if (zero_ < 2) return StepStrategy::clip_gradients();
  GPT& model = session_.model();
  const size_t lo = std::max(model.trainable_begin(), shards_[replica()]), hi = shards_[replica() + 1];
  const float norm = chained_grad_norm(world_, replicas(), model.grads(), lo, hi);
  if (lo < hi) session_.optim().clip_to(model.grads(), lo, norm, hi);
  return norm;
}

void DataParallelStep::update(float lr) {
  StepStrategy::update(lr);
  GPT& model = session_.model();
  if (zero_ >= 1) allgather_shards(model.params(), model.trainable_begin());
}

void DataParallelStep::add_metrics(nlohmann::json& record) {
  record["comm"] = {{"wait_s", wait_seconds_}, {"compute_s", compute_seconds_},
                    {"update_s", update_timer_.seconds()}, {"buckets", reducer_->buckets()},
                    {"bytes_reduced", reducer_->bytes_reduced()}};
}

void add_ranks_results(MpiWorld& world, const std::vector<double>& losses, GPT& model, StepResult& r) {
  const int A = static_cast<int>(losses.size()), count = world.size() * A;
  // The loss: every micro-batch's, added in one-process order; the FLOPs of all ranks.
  std::vector<double> all_losses(count);
  world.allgather(losses.data(), A, all_losses.data());
  for (double loss : all_losses) r.loss += loss;
  r.loss /= count;
  r.sum_flops(world);
  // The experts' load over every rank's micro-batches: each rank moves the balancing bias alike.
  RoutingStats& routing = model.step_routing();
  if (!routing.layers.empty()) routing.set_values(world.sum(routing.values()));
}

void DataParallelStep::add_embedding_grads(GPT& model) {
  const int B = settings_.train.batch_size, T = settings_.train.seq_len, C = model.config().n_embd;
  const int N = world_.size();
  const size_t rows = size_t(B) * T;
  all_tokens_.resize(rows * N);
  all_rows_.resize(rows * C * N);
  MPI_Request requests[2];
  MPI_Iallgather(model.tokens(), static_cast<int>(rows), MPI_INT32_T, all_tokens_.data(), static_cast<int>(rows),
                 MPI_INT32_T, replicas(), &requests[0]);
  MPI_Iallgather(model.embedding_output_grad(), static_cast<int>(rows * C), MPI_FLOAT, all_rows_.data(),
                 static_cast<int>(rows * C), MPI_FLOAT, replicas(), &requests[1]);
  for (MPI_Request& request : requests) world_.wait(request, "the all-gather of the embedding gradients");
  // Every rank's rows, in rank order, into the reduced token-embedding gradient.
  kernels::encoder_backward(model.grads() + model.token_embedding_range().first, nullptr, all_rows_.data(),
                            all_tokens_.data(), N * B, T, C);
}

void DataParallelStep::allgather_shards(float* buffer, size_t begin) {
  parallel::allgather_shards(world_, replicas(), shards_, buffer, begin, "the all-gather of the shards");
}

}  // namespace frugal::parallel
