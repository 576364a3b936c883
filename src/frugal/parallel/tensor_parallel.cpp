// The tensor-parallel step and its MPI collectives; see tensor_parallel.h.
#include "frugal/parallel/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"
#include "frugal/parallel/grad_norm.h"
#include "frugal/parallel/shards.h"
#include "frugal/parallel/wire.h"
#include "frugal/parallel/zero.h"

namespace frugal::parallel {

// ---- MpiTensorCollectives ----

// A thread of this rank that waits on one exchange at a time (MpiWorld::wait: it polls, sleeping
// between polls so that it leaves the cores to the computation, and stops the job naming the
// group if the exchange goes unanswered), so that the exchange moves on while the rank's own
// thread computes. Started with the collectives' first background sum.
class MpiTensorCollectives::BackgroundWait {
 public:
  explicit BackgroundWait(MpiWorld& world) : world_(world), thread_([this] { run(); }) {}
  ~BackgroundWait() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  void start(MPI_Request request) {
    {
      const std::lock_guard lock(mutex_);
      request_ = request;
      started_ = std::chrono::steady_clock::now();
      posted_ = true;
      done_ = false;
    }
    changed_.notify_all();
  }
  // Blocks until the started exchange has completed. Returns the seconds it ran beside the
  // caller's computation (from start to its end or to this call, whichever came first).
  double finish() {
    const auto called = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return done_; });
    posted_ = false;
    return std::chrono::duration<double>(std::min(completed_, called) - started_).count();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stop_ || (posted_ && !done_); });
      if (stop_) return;
      MPI_Request request = request_;
      lock.unlock();
      world_.wait(request, "the tensor-parallel group's exchange (in the background)");
      lock.lock();
      completed_ = std::chrono::steady_clock::now();
      done_ = true;
      changed_.notify_all();
    }
  }

  MpiWorld& world_;
  std::mutex mutex_;
  std::condition_variable changed_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::chrono::steady_clock::time_point started_, completed_;
  bool posted_ = false, done_ = false, stop_ = false;
  std::thread thread_;  // last: it starts once the members above are made
};

MpiTensorCollectives::MpiTensorCollectives(MpiWorld& world, MPI_Comm group, bool sequence, bool overlap,
                                           kernels::DType wire)
    : world_(world), group_(group), sequence_(sequence), overlap_(overlap), wire_(wire) {
  MPI_Comm_rank(group, &rank_);
  MPI_Comm_size(group, &size_);
}

MpiTensorCollectives::~MpiTensorCollectives() = default;

void MpiTensorCollectives::count(size_t values_sent, double waited, size_t value_bytes) {
  seconds_ += waited;
  bytes_ += double(values_sent) * double(value_bytes);
  ++calls_;
}

void MpiTensorCollectives::all_gather(const float* local, size_t n, float* out) {
  FRUGAL_CHECK(n <= size_t(INT32_MAX), "internal: a tensor-parallel all-gather of {} floats", n);
  FRUGAL_CHECK(!started_.x, "internal: a tensor-parallel collective while a background sum is in flight");
  const Timer timer;
  MPI_Request request;
  MPI_Iallgather(local, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, group_, &request);
  world_.wait(request, "the tensor-parallel group's exchange");
  count(n, timer.seconds());
}

MpiTensorCollectives::PendingSum MpiTensorCollectives::post_sum(float* x, size_t n, float* out, bool scatter,
                                                                MPI_Request& request) {
  FRUGAL_CHECK(!started_.x, "internal: a tensor-parallel collective while a background sum is in flight");
  const size_t part = scatter ? n / size_ : n;  // floats each rank sends each rank
  FRUGAL_CHECK(part * (scatter ? size_ : 1) == n && part <= size_t(INT32_MAX),
               "internal: a tensor-parallel sum of {} floats over {} ranks", n, size_);
  gathered_.resize(part * size_);  // (size, part)
  const void* payload = wire_payload(x, n, wire_, staged_);
  void* arrived = wire_landing(gathered_.data(), gathered_.size(), wire_, gathered16_);
  const MPI_Datatype type = wire_type(wire_);
  if (scatter)  // every rank's slice of this rank's rows
    MPI_Ialltoall(payload, static_cast<int>(part), type, arrived, static_cast<int>(part), type, group_, &request);
  else
    MPI_Iallgather(payload, static_cast<int>(n), type, arrived, static_cast<int>(n), type, group_, &request);
  return {.x = x, .n = part, .out = out, .scatter = scatter};
}

namespace {
// out[i] = g[i] op g[n + i] op … op g[(ranks − 1)·n + i]: the ranks' i-th values (gathered in rank
// order, (ranks, n)) combined in rank order, the same bits on every rank. out may be g's first row.
template <class Op>
void combine_in_rank_order(const float* g, size_t n, int ranks, float* out, Op op) {
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (size_t i = 0; i < n; ++i) {
    float acc = g[i];
    for (int r = 1; r < ranks; ++r) acc = op(acc, g[r * n + i]);
    out[i] = acc;
  }
}
}  // namespace

template <class Op>
void MpiTensorCollectives::reduce(float* x, size_t n, Op op) {
  gathered_.resize(n * size_);
  all_gather(x, n, gathered_.data());
  combine_in_rank_order(gathered_.data(), n, size_, x, op);
}

void MpiTensorCollectives::all_reduce_sum(float* x, size_t n) { reduce(x, n, std::plus<float>()); }

void MpiTensorCollectives::complete(const PendingSum& sum, double waited) {
  count(sum.scatter ? sum.n * (size_ - 1) : sum.n, waited, kernels::dtype_size(wire_));
  wire_arrived(gathered_.data(), gathered_.size(), wire_, gathered16_);
  combine_in_rank_order(gathered_.data(), sum.n, size_, sum.out, std::plus<float>());  // as reduce() adds
}

void MpiTensorCollectives::reduce_scatter_sum(float* x, size_t n, float* out) {
  const Timer timer;
  MPI_Request request;
  const PendingSum sum = post_sum(x, n, out, true, request);
  world_.wait(request, "the tensor-parallel group's exchange");
  complete(sum, timer.seconds());
}

void MpiTensorCollectives::sum_rows(float* x, size_t N, size_t width, float* local) {
  const bool scatter = coord().split_rows();
  const Timer timer;
  MPI_Request request;
  const PendingSum sum = post_sum(x, N * width, scatter ? local : x, scatter, request);
  world_.wait(request, "the tensor-parallel group's exchange");
  complete(sum, timer.seconds());
}

void MpiTensorCollectives::gather_rows(const float* local, size_t n, float* out) {
  if (wire_ == kernels::DType::F32) return all_gather(local, n, out);
  FRUGAL_CHECK(n <= size_t(INT32_MAX), "internal: a tensor-parallel all-gather of {} values", n);
  FRUGAL_CHECK(!started_.x, "internal: a tensor-parallel collective while a background sum is in flight");
  const Timer timer;
  const MPI_Datatype type = wire_type(wire_);
  MPI_Request request;
  MPI_Iallgather(wire_payload(local, n, wire_, staged_), static_cast<int>(n), type,
                 wire_landing(out, n * size_, wire_, gathered16_), static_cast<int>(n), type, group_, &request);
  world_.wait(request, "the tensor-parallel group's exchange");
  wire_arrived(out, n * size_, wire_, gathered16_);
  count(n, timer.seconds(), sizeof(kernels::bf16));
}

void MpiTensorCollectives::start_sum_rows(float* x, size_t N, size_t width, float* local) {
  if (!overlaps()) return sum_rows(x, N, width, local);
  const bool scatter = coord().split_rows();
  MPI_Request request;
  started_ = post_sum(x, N * width, scatter ? local : x, scatter, request);
  if (!background_) background_ = std::make_unique<BackgroundWait>(world_);
  background_->start(request);
}

void MpiTensorCollectives::finish_sum_rows() {
  if (!started_.x) return;  // a group of one: done in start_sum_rows
  const Timer timer;
  hidden_seconds_ += background_->finish();
  complete(std::exchange(started_, {}), timer.seconds());
}

void MpiTensorCollectives::all_reduce_max(float* x, size_t n) {
  reduce(x, n, [](float a, float b) { return std::max(a, b); });
}

double MpiTensorCollectives::sum(double x) {
  sum_each({&x, 1});
  return x;
}

void MpiTensorCollectives::sum_each(std::span<double> values) {
  world_.sum_in_rank_order(group_, values, "the tensor-parallel group's sums");
}

// ---- TensorParallelStep ----

void check_tensor_parallel(const RunSettings& settings, int ranks) {
  const int T = settings.parallel.tensor;
  FRUGAL_CHECK(ranks % T == 0, "parallel.tensor = {} does not divide the {} ranks; run mpirun -np with a "
               "multiple of {}", T, ranks, T);
  FRUGAL_CHECK(settings.model.moe.experts == 0, "model.moe.experts = {} with parallel.tensor = {}: a mixture "
               "of experts under tensor parallelism is not built yet; set one of them to its default (0, 1)",
               settings.model.moe.experts, T);
  LocalSizes::of(settings.model, {0, T});  // the heads and hidden units divide (checked with the config too)
}

float tensor_grad_norm(MpiWorld& world, MPI_Comm chain, MpiTensorCollectives& group, const ParamTable& table,
                       const float* grads, size_t lo, size_t hi) {
  return sharded_grad_norm(
      world, chain, table, grads, lo, hi, [](const ParamInfo& e) { return e.placement.kind == Placement::Kind::Sharded; },
      [&group](double split) { return group.sum(split); });
}

TensorParallelStep::TensorParallelStep(Session& session, MethodSet& methods, const RunSettings& settings,
                                       MpiWorld& world)
    : StepStrategy(session, methods, settings), world_(world) {
  const int T = settings.parallel.tensor, N = world.size();
  check_tensor_parallel(settings, N);
  base_ = world.new_communicator();
  mesh_ = std::make_unique<MpiMesh>(MeshShape::data_pipeline(N / T, 1, T), base_);
  comm_ = std::make_unique<MpiTensorCollectives>(world, mesh_->group(Dim::Tensor), settings.parallel.sequence,
                                                 settings.parallel.tensor_overlap, comm_dtype(settings.parallel));
  replica_group_ = std::make_unique<MpiGroup>(world, mesh_->group(Dim::Data));
  name_ = N == T ? fmt::format("tensor-parallel over {} ranks", T)
                 : fmt::format("tensor-parallel over {} ranks × {} data-parallel replicas", T, N / T);
  if (settings.parallel.sequence) name_ += ", sequence-parallel";
  if (settings.parallel.zero > 0) name_ += fmt::format(", ZeRO-{}", settings.parallel.zero);
  shard_table_ = ParamTable::build(session.model().config(), BlockRange::whole(session.model().config()),
                                   comm_->coord());
  zero_ = std::make_unique<ZeroOverReplicas>(world, mesh_->group(Dim::Data), settings.parallel.zero, shard_table_,
                                             settings.optim.muon.enabled, comm_dtype(settings.parallel));
}

TensorParallelStep::~TensorParallelStep() {
  // The session may still hold a shard that refers to comm_ (drop_shard; fit() synchronize()s
  // first where the whole model is still needed).
  if (sharded_) drop_shard(session_);
  comm_.reset();
  replica_group_.reset();
  mesh_.reset();
  MPI_Comm_free(&base_);
}

void TensorParallelStep::hold(bool sharded, bool gradients) {
  if (sharded == sharded_) return;
  // ZeRO: the moments are whole on every replica while the session is, cut again with the shard.
  if (!sharded) zero_->before_gather(session_);
  hold_shard(session_, sharded, Placement::Kind::Sharded, *comm_,
             [this](const float* local, size_t n, float* out) { comm_->all_gather(local, n, out); }, gradients);
  sharded_ = sharded;
  if (sharded) zero_->after_cut(session_);
}

MemoryPlan TensorParallelStep::memory_plan() const {
  const TrainSettings& t = settings_.train;
  const ModelConfig& config = session_.model().config();
  const BlockRange whole = BlockRange::whole(config);
  return GPT::estimate_memory(config, t.batch_size, t.seq_len, session_.model().recompute(), whole, whole, 1,
                              comm_->coord(), linear_dtype(t));
}

size_t TensorParallelStep::optimizer_bytes() const { return zero_->optimizer_bytes(shard_table_); }

size_t TensorParallelStep::resident_gradient_bytes() const { return zero_->resident_gradient_bytes(shard_table_); }

void TensorParallelStep::reset_gradients() { zero_->reset_gradients(session_.model()); }

StepResult TensorParallelStep::run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) {
  hold(true);  // the first step, or back to the shard after a synchronize()
  comm_->reset_counters();
  return run_events(step, next_batch, record);
}

void TensorParallelStep::synchronize() { hold(false); }

CheckpointRole TensorParallelStep::prepare_checkpoint() {
  if (!sharded_) return {};  // whole (before the first step, or around a method's Reconfigure)
  zero_->before_gather(session_);  // ZeRO: the shard's moments whole on every replica
  return {.sharded = true, .writes = replica() == 0};
}

bool TensorParallelStep::cut_to_parts() {
  if (settings_.parallel.zero > 0) return false;
  hold(true);
  return true;
}

void TensorParallelStep::after_checkpoint() {
  if (sharded_) zero_->after_cut(session_);
}

void TensorParallelStep::reconfigure(TrainContext& ctx) {
  // The methods choose masks (from whole linears) and reshape on the whole model, alike on every
  // rank, when one of them acts now; the next step cuts it again, the formats with it
  // (Session::set_linear_format). A step whose AfterGradReduce reads whole gradients gathers them
  // with it (run_micro_batches).
  if (methods_.acts_now(Event::Reconfigure, ctx, &Capabilities::changes_shapes) ||
      methods_.acts_now(Event::Reconfigure, ctx, &Capabilities::owns_masks))
    hold(false);
  StepStrategy::reconfigure(ctx);
}

void TensorParallelStep::begin_context(TrainContext& ctx) {
  // Per-block sums over the group's parts, added in rank order (the same bits on every rank).
  ctx.sum_over_parts = [this](std::span<double> values) { comm_->sum_each(values); };
  if (replicas() == 1) return;
  ctx.allgather_replicas = world_.allgather_over(mesh_->group(Dim::Data));
  ctx.replicas = replicas();
}

void TensorParallelStep::run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                           StepResult& r) {
  const Timer timer;
  const int A = settings_.train.accum_at(step), D = replicas(), d = replica();
  const int count = D * A;  // micro-batches in the step, over the replicas
  // The global batch in one-process order: replica d's are d·A .. d·A + A − 1; the others' are
  // drawn and dropped, so every rank's loader stays at the same position.
  for (int skipped = 0; skipped < d * A; ++skipped) draw(next_batch);
  std::vector<double> losses(A);  // the same bits on every rank of the tensor group
  for (int micro = 0; micro < A; ++micro) {
    draw(next_batch);
    losses[micro] = run_micro_batch(ctx, micro, step, d * A + micro, count, r);
  }
  for (int skipped = (d + 1) * A; skipped < count; ++skipped) draw(next_batch);
  compute_seconds_ = timer.seconds();
  // Each shard's gradients summed over its replicas (ZeRO-2: each replica gets its part's sums).
  zero_->sum_gradients(session_.model(), "the sum of the gradients over the tensor group's replicas");
  // A method reads every gradient at this AfterGradReduce: under ZeRO-2 the replicas share their
  // parts' sums first; for whole linears' gradients (mst's growth) the whole model with its
  // gradients is on every rank until the clip (which cuts it again).
  if (methods_.reads_all_gradients_now(ctx)) zero_->share_gradients(session_.model());
  if (methods_.reads_all_gradients_now(ctx, true)) hold(false, true);
  // The loss: every micro-batch's, added in one-process order.
  std::vector<double> all_losses(count);
  MPI_Request request;
  MPI_Iallgather(losses.data(), A, MPI_DOUBLE, all_losses.data(), A, MPI_DOUBLE, mesh_->group(Dim::Data), &request);
  world_.wait(request, "the all-gather of the replicas' losses");
  for (double loss : all_losses) r.loss += loss;
  r.loss /= count;
  // Each shard counted the FLOPs of its own heads, hidden units and vocabulary columns, each
  // replica those of its micro-batches.
  r.sum_flops(world_);
}

float TensorParallelStep::clip_gradients() {
  hold(true, true);  // back to the shard if a method read the gradients whole
  update_timer_.reset();
  GPT& model = session_.model();
  // Under ZeRO-2 each replica holds the sums of its part of the shard, and the replicas chain their
  // parts in order (the same bits as ZeRO-0's).
  const auto [lo, hi, chain] = zero_->held_gradients(model);
  const float norm = tensor_grad_norm(world_, chain, *comm_, model.table(), model.grads(), lo, hi);
  if (lo < hi) session_.optim().clip_to(model.grads(), lo, norm, hi);
  return norm;
}

void TensorParallelStep::update(float lr) {
  StepStrategy::update(lr);
  zero_->share_updates(session_.model());  // ZeRO: each replica updated its part of the shard
}

void TensorParallelStep::add_metrics(nlohmann::json& record) {
  // wait_s: the seconds this rank waited inside the group's collectives (exposed); hidden_s: the
  // seconds the backward's input-gradient sums ran beside its weight gradients.
  record["comm"] = {{"wait_s", comm_->seconds()}, {"hidden_s", comm_->hidden_seconds()}, {"compute_s", compute_seconds_},
                    {"update_s", update_timer_.seconds()}, {"buckets", comm_->calls()},
                    {"bytes_reduced", comm_->bytes()}};
}

}  // namespace frugal::parallel
