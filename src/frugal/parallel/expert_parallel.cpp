// The expert-parallel step and its all-to-all; see expert_parallel.h.
#include "frugal/parallel/expert_parallel.h"

#include <fmt/format.h>

#include <cmath>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"
#include "frugal/parallel/data_parallel.h"
#include "frugal/parallel/grad_norm.h"
#include "frugal/parallel/shards.h"
#include "frugal/parallel/wire.h"
#include "frugal/parallel/zero.h"

namespace frugal::parallel {

// ---- MpiExpertCollectives ----

MpiExpertCollectives::MpiExpertCollectives(MpiWorld& world, MPI_Comm group, kernels::DType wire)
    : world_(world), group_(group), wire_(wire) {
  MPI_Comm_rank(group, &rank_);
  MPI_Comm_size(group, &size_);
  for (auto* v : {&send_counts_, &send_displs_, &recv_counts_, &recv_displs_}) v->resize(size_);
}

void MpiExpertCollectives::all_to_all(const int32_t* send, int32_t* recv, int per_rank) {
  const Timer timer;
  MPI_Request request;
  MPI_Ialltoall(send, per_rank, MPI_INT32_T, recv, per_rank, MPI_INT32_T, group_, &request);
  world_.wait(request, "the expert group's exchange of row counts");
  seconds_ += timer.seconds();
  bytes_ += double(size_ - 1) * per_rank * sizeof(int32_t);
  ++calls_;
}

void MpiExpertCollectives::all_to_all_rows(const float* send, const int32_t* send_rows, float* recv,
                                           const int32_t* recv_rows, int width) {
  const Timer timer;
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    send_counts_[r] = static_cast<int>(int64_t(send_rows[r]) * width);
    recv_counts_[r] = static_cast<int>(int64_t(recv_rows[r]) * width);
    send_displs_[r] = static_cast<int>(sent);
    recv_displs_[r] = static_cast<int>(received);
    sent += send_counts_[r];
    received += recv_counts_[r];
  }
  FRUGAL_CHECK(sent <= INT32_MAX && received <= INT32_MAX, "internal: an expert exchange of {} floats "
               "exceeds MPI's int counts; use smaller micro-batches", std::max(sent, received));
  const MPI_Datatype type = wire_type(wire_);
  MPI_Request request;
  MPI_Ialltoallv(wire_payload(send, size_t(sent), wire_, sent16_), send_counts_.data(), send_displs_.data(), type,
                 wire_landing(recv, size_t(received), wire_, received16_), recv_counts_.data(), recv_displs_.data(),
                 type, group_, &request);
  world_.wait(request, "the expert group's exchange of routed rows");
  wire_arrived(recv, size_t(received), wire_, received16_);
  seconds_ += timer.seconds();
  bytes_ += double(sent - send_counts_[rank_]) * double(kernels::dtype_size(wire_));
  ++calls_;
}

void MpiExpertCollectives::all_gather(const float* local, size_t n, float* out) {
  FRUGAL_CHECK(n <= size_t(INT32_MAX), "internal: an expert group's all-gather of {} floats", n);
  MPI_Request request;
  MPI_Iallgather(local, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, group_, &request);
  world_.wait(request, "the expert group's gathering of the experts");
}

void MpiExpertCollectives::sum_each(std::span<double> values) {
  world_.sum_in_rank_order(group_, values, "the expert group's sums");
}

// ---- ExpertParallelStep ----

namespace {

MeshShape data_expert(int D, int P) {
  MeshShape shape;
  shape.sizes[static_cast<int>(Dim::Data)] = D;
  shape.sizes[static_cast<int>(Dim::Expert)] = P;
  return shape;
}

bool is_expert(const TensorSpec& t) { return t.placement.kind == Placement::Kind::Experts; }

}  // namespace

ExpertParallelStep::ExpertParallelStep(Session& session, MethodSet& methods, const RunSettings& settings,
                                       MpiWorld& world)
    : StepStrategy(session, methods, settings), world_(world), wire_(comm_dtype(settings.parallel)) {
  const int P = settings.parallel.expert, N = world.size();
  FRUGAL_CHECK(N % P == 0, "parallel.expert = {} does not divide the {} ranks; run mpirun -np with a "
               "multiple of {}", P, N, P);
  // The degree against the experts, tensor parallelism, pipelines and the methods a mixture of
  // experts does not run with (all but freezing): refused with the config (train/run_config.cpp).
  base_ = world.new_communicator();
  mesh_ = std::make_unique<MpiMesh>(data_expert(N / P, P), base_);
  comm_ = std::make_unique<MpiExpertCollectives>(world, mesh_->group(Dim::Expert), wire_);
  name_ = N == P ? fmt::format("expert-parallel over {} ranks", P)
                 : fmt::format("expert-parallel over {} ranks × {} data-parallel groups", P, N / P);
  if (settings.parallel.zero > 0) name_ += fmt::format(", ZeRO-{}", settings.parallel.zero);
  const ModelConfig& config = session.model().config();
  shard_table_ = ParamTable::build(config, BlockRange::whole(config), comm_->coord());
  zero_ = std::make_unique<ZeroOverReplicas>(world, mesh_->group(Dim::Data), settings.parallel.zero, shard_table_,
                                             settings.optim.muon.enabled, wire_);
}

ExpertParallelStep::~ExpertParallelStep() {
  // The session may still hold a shard that refers to comm_ (drop_shard; fit() synchronize()s
  // first where the whole model is still needed).
  if (sharded_) drop_shard(session_);
  comm_.reset();
  mesh_.reset();
  MPI_Comm_free(&base_);
}

void ExpertParallelStep::hold(bool sharded) {
  if (sharded == sharded_) return;
  // ZeRO: the moments are whole on every rank while the session is, cut again with the shard.
  if (!sharded) zero_->before_gather(session_);
  hold_shard(session_, sharded, Placement::Kind::Experts, *comm_,
             [this](const float* local, size_t n, float* out) { comm_->all_gather(local, n, out); });
  sharded_ = sharded;
  if (sharded) zero_->after_cut(session_);
}

size_t ExpertParallelStep::optimizer_bytes() const { return zero_->optimizer_bytes(shard_table_); }

size_t ExpertParallelStep::resident_gradient_bytes() const { return zero_->resident_gradient_bytes(shard_table_); }

void ExpertParallelStep::reset_gradients() { zero_->reset_gradients(session_.model()); }

StepResult ExpertParallelStep::run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) {
  hold(true);  // the first step, or back to the shard after a synchronize()
  comm_->reset_counters();
  return run_events(step, next_batch, record);
}

void ExpertParallelStep::synchronize() { hold(false); }

void ExpertParallelStep::begin_context(TrainContext& ctx) {
  ctx.allgather_replicas = world_.allgather_over(base_);
  ctx.replicas = world_.size();
  ctx.replicas_in_lockstep = true;  // every rank runs every mixture's exchanges (AutoCache serves alike)
  // Per-block sums over the expert group's parts (each rank's experts, the replicated tensors once).
  ctx.sum_over_parts = [this](std::span<double> values) { comm_->sum_each(values); };
}

void ExpertParallelStep::run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                           StepResult& r) {
  const Timer timer;
  const int A = settings_.train.accum_at(step), N = world_.size(), rank = world_.rank();
  const int count = N * A;  // micro-batches in the step, over all ranks
  // The global batch in one-process order: rank r's micro-batches are r·A .. r·A + A − 1; the
  // others' are drawn and dropped, so every rank's loader stays at the same position. (The mesh's
  // rank d·P + p is the world's: base_ is a copy of the world's communicator.)
  for (int skipped = 0; skipped < rank * A; ++skipped) draw(next_batch);
  std::vector<double> losses(A);
  for (int micro = 0; micro < A; ++micro) {
    draw(next_batch);
    losses[micro] = run_micro_batch(ctx, micro, step, rank * A + micro, count, r);
  }
  for (int skipped = (rank + 1) * A; skipped < count; ++skipped) draw(next_batch);
  compute_seconds_ = timer.seconds();
  GPT& model = session_.model();
  reduce_gradients(model);
  // A method reads every gradient at this AfterGradReduce: under ZeRO-2 the replicas share their
  // parts' sums first.
  if (methods_.reads_all_gradients_now(ctx)) zero_->share_gradients(model);
  add_ranks_results(world_, losses, model, r);
}

void ExpertParallelStep::reduce_gradients(GPT& model) {
  const Timer timer;
  const size_t begin = model.trainable_begin(), total = model.num_floats();
  bytes_reduced_ = 0;
  reductions_ = 0;
  // [from, to) of the flat buffer summed over comm (the alignment padding between tensors, zero,
  // goes along)
  const auto reduce = [&](MPI_Comm comm, size_t from, size_t to, const char* what) {
    if (from >= to) return;
    all_reduce_sum(world_, comm, model.grads() + from, to - from, wire_, staged_, what);
    bytes_reduced_ += double(to - from) * kernels::dtype_size(wire_);
    ++reductions_;
  };
  // The replicated tensors' over the expert group first; then everything over the data groups
  // (under ZeRO-2 each data group gets its part's sums).
  const char* replicated = "the sum of the replicated gradients over the expert group";
  size_t run = begin;  // the start of the run of replicated tensors not reduced yet
  for (const ParamInfo& e : model.table().entries()) {
    if (!is_expert(e) || e.offset < begin) continue;
    reduce(mesh_->group(Dim::Expert), run, e.offset, replicated);
    run = std::max(run, e.offset + e.numel);
  }
  reduce(mesh_->group(Dim::Expert), run, total, replicated);
  if (const size_t n = zero_->sum_gradients(model, "the sum of the gradients over the data groups")) {
    bytes_reduced_ += double(n) * kernels::dtype_size(wire_);
    ++reductions_;
  }
  reduce_seconds_ = timer.seconds();
}

float ExpertParallelStep::clip_gradients() {
  update_timer_.reset();
  GPT& model = session_.model();
  // Σ g² of the experts on each rank, added over the expert group in rank order, and of the
  // replicated tensors (the same on every rank) once; under ZeRO-2 each data group holds its part's
  // sums, and the groups chain their parts in order.
  const auto [lo, hi, chain] = zero_->held_gradients(model);
  const float norm = sharded_grad_norm(world_, chain, model.table(), model.grads(), lo, hi, is_expert, [this](double split) {
    comm_->sum_each({&split, 1});
    return split;
  });
  if (lo < hi) session_.optim().clip_to(model.grads(), lo, norm, hi);
  return norm;
}

void ExpertParallelStep::update(float lr) {
  StepStrategy::update(lr);
  zero_->share_updates(session_.model());  // ZeRO: each data group updated its part of the shard
}

void ExpertParallelStep::add_metrics(nlohmann::json& record) {
  // Every collective of the step is waited for where it is called: all of its time is exposed.
  record["comm"] = {{"exchange_s", comm_->seconds()}, {"exchanges", comm_->calls()},
                    {"bytes_exchanged", comm_->bytes()}, {"wait_s", reduce_seconds_},
                    {"compute_s", compute_seconds_}, {"update_s", update_timer_.seconds()},
                    {"bytes_reduced", bytes_reduced_}, {"buckets", reductions_}};
}

}  // namespace frugal::parallel
