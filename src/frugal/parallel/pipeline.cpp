// The pipeline step with AutoPipe and AutoDP; see pipeline.h.
#include "frugal/parallel/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/timer.h"
#include "frugal/io/stdout.h"
#include "frugal/kernels/ops.h"
#include "frugal/parallel/grad_norm.h"
#include "frugal/parallel/shards.h"
#include "frugal/parallel/wire.h"

namespace frugal::parallel {
namespace {

constexpr int kActivationTag = 0, kGradientTag = 1, kTiedTag = 2, kMoveTag = 3;
constexpr size_t kTiedPiece = size_t(1) << 20;  // floats per message of the tied-head gradient

nlohmann::json costs_to_json(const UnitCosts& c) {
  return {{"embeddings", {c.embeddings_forward, c.embeddings_backward}},
          {"block_forward", c.block_forward},
          {"block_backward", c.block_backward},
          {"head", {c.head_forward, c.head_backward}}};
}

UnitCosts costs_from_json(const nlohmann::json& j) {
  UnitCosts c;
  c.embeddings_forward = j.at("embeddings").at(0);
  c.embeddings_backward = j.at("embeddings").at(1);
  c.block_forward = j.at("block_forward").get<std::vector<double>>();
  c.block_backward = j.at("block_backward").get<std::vector<double>>();
  c.head_forward = j.at("head").at(0);
  c.head_backward = j.at("head").at(1);
  return c;
}

}  // namespace

PipelineStep::PipelineStep(Session& session, MethodSet& methods, const RunSettings& settings, MpiWorld& world)
    : StepStrategy(session, methods, settings), world_(world), tensor_(settings.parallel.tensor),
      dp_settings_(settings),
      gpipe_(settings.parallel.schedule == "gpipe"), elastic_(settings.parallel.elastic),
      balance_parameters_(settings.parallel.autopipe_cost == "parameters"), wire_(comm_dtype(settings.parallel)) {
  const int K = settings.parallel.pipeline_stages, N = world.size(), M = settings.train.grad_accum;
  const int L = session.model().config().n_layer, T = tensor_;
  FRUGAL_CHECK(N % (K * T) == 0, "parallel.pipeline_stages = {}{} does not divide the {} ranks; run mpirun "
               "-np with a multiple of {} (stages × {}data-parallel replicas)", K,
               T > 1 ? fmt::format(" × parallel.tensor = {}", T) : "", N, K * T, T > 1 ? "tensor ranks × " : "");
  FRUGAL_CHECK(K <= L, "parallel.pipeline_stages = {} exceeds model.n_layer = {}: every stage needs "
               "a block", K, L);
  // A method that reshapes the model (the V-cycle) may leave fewer blocks than stages: the
  // pipeline then runs fewer stages (stages_for), the freed ranks as replicas.
  int fewest_blocks = L;
  for (const auto& method : methods.methods())
    if (const Capabilities c = method->capabilities(); c.changes_shapes && c.fewest_blocks > 0)
      fewest_blocks = std::min(fewest_blocks, c.fewest_blocks);
  // Every layout the run may take splits the step's micro-batches evenly over its replicas.
  const int G = groups();  // ranks of one tensor coordinate: the pipeline's ranks
  const int most_replicas = elastic_ || fewest_blocks < K ? G : G / K;
  FRUGAL_CHECK(M % most_replicas == 0 && M >= K, "train.grad_accum = {} must be a multiple of {} "
               "(the most data-parallel replicas this run may have{}) and at least parallel."
               "pipeline_stages = {}; it is the step's micro-batch count over all ranks (the "
               "pipeline's M; {} to {} fill a pipeline of {} stages well)", M, most_replicas,
               elastic_ ? ", with parallel.elastic" : fewest_blocks < K ? ", with a V-cycle level of fewer "
               "blocks than stages" : "", K, K, 6 * K, K);
  // A fixed-length pipeline keeps a trainable block per stage: refused now rather than when the
  // blocks freeze (with a V-cycle the levels' depths are checked as they come).
  for (const auto& method : methods.methods())
    if (const Capabilities c = method->capabilities(); !elastic_ && c.changes_trainable_set) {
      const int most = c.most_frozen < 0 ? L - 1 : std::min(c.most_frozen, L);
      FRUGAL_CHECK(L - most >= K, "methods.{} may freeze {} of the {} blocks, which leaves fewer trainable "
                   "blocks than the {} stages of a pipeline of fixed length (parallel.elastic = false); set "
                   "methods.freeze.max_frozen <= {}{}", method->name(), most, L, K, L - K,
                   T > 1 ? "" : " or parallel.elastic = true (the pipeline then shortens)");
    }
  FRUGAL_CHECK(settings.parallel.zero == 0, "parallel.zero = {} is not supported with "
               "parallel.pipeline_stages > 1 (each stage already keeps only its own slice of the "
               "optimizer's work); set parallel.zero = 0", settings.parallel.zero);
  dp_settings_.train.grad_accum = M / N;  // only used once the pipeline is one stage long
  base_ = world.new_communicator();
  if (T > 1) start_tensor_groups(methods, fewest_blocks);
  held_.assign(N, BlockRange::whole(session.model().config()));
  layout_.stages = K;
  layout_.replicas = G / K;
  mesh_ = std::make_unique<MpiMesh>(MeshShape::data_pipeline(G / K, K, T), base_);
  name_ = describe_layout(describe_shape(K, G / K));
}

PipelineStep::~PipelineStep() {
  // A stage's tensor shard refers to tensor_comm_ (drop_shard; fit() synchronize()s first where
  // the whole model is still needed).
  if (sharded_) drop_shard(session_);
  tensor_comm_.reset();
  if (tensor_group_ != MPI_COMM_NULL) MPI_Comm_free(&tensor_group_);
  dp_.reset();
  mesh_.reset();
  MPI_Comm_free(&base_);
}

std::pair<size_t, size_t> PipelineStep::slice() const {
  const GPT& model = session_.model();
  const int k = stage();
  return {k == 0 ? 0 : model.table().layer_range(layout_.bounds[k]).first, model.num_floats()};
}

std::vector<BlockRange> PipelineStep::ranges(const PipelineLayout& layout) const {
  const int K = layout.stages;
  const MeshShape shape = MeshShape::data_pipeline(layout.replicas, K, tensor_);
  std::vector<BlockRange> out;
  for (int rank = 0; rank < world_.size(); ++rank) {
    const int k = coordinate(shape.coordinates(rank), Dim::Pipeline);
    out.push_back({layout.bounds[k], layout.bounds[k + 1], k == 0, k == K - 1});
  }
  return out;
}

void PipelineStep::hold(const std::vector<BlockRange>& next) {
  // With tensor parallelism the blocks move whole, and a stage's ranks then cut them to their shards.
  const bool shard = tensor_ > 1 && !(next[world_.rank()] == BlockRange::whole(session_.model().config()));
  if (held_ == next && sharded_ == shard) return;
  hold_tensor_shard(false);
  move_blocks(next);
  hold_tensor_shard(shard);
}

void PipelineStep::move_blocks(const std::vector<BlockRange>& next) {
  if (held_ == next) return;
  const int me = world_.rank(), L = session_.model().config().n_layer;
  const std::vector<TensorMove> moves = tensor_moves(session_.model().config(), held_, next);
  const BlockRange now = held_[me];
  const bool moments = session_.optim().steps_taken() > 0;  // the same on every rank
  // Between steps the gradients are spent: their memory goes before the new session takes its own.
  release_pages(session_.model().grads(), sizeof(float) * session_.model().num_floats());
  session_.repartition(next[me], [&](const NamedTensors& from, const NamedTensors& to) {
    // The tensors other ranks own: received from their owner; those this rank owns: sent to
    // whoever holds them next.
    std::vector<MPI_Request> requests;
    for (const TensorMove& move : moves) {
      if (move.from != me && move.to != me) continue;
      const bool sending = move.from == me;
      const NamedTensors& tensors = sending ? from : to;
      std::vector<std::span<float>> parts{tensors.param(move.name)};
      if (move.moments && moments) parts.insert(parts.end(), {tensors.m(move.name), tensors.v(move.name)});
      for (const std::span<float> part : parts) {
        MPI_Request& request = requests.emplace_back();
        if (sending)
          MPI_Isend(part.data(), static_cast<int>(part.size()), MPI_FLOAT, move.to, kMoveTag, base_, &request);
        else
          MPI_Irecv(part.data(), static_cast<int>(part.size()), MPI_FLOAT, move.from, kMoveTag, base_, &request);
      }
    }
    for (MPI_Request& request : requests) world_.wait(request, "moving blocks between the pipeline's ranks");
    // What this rank keeps, one tensor at a time, each returned to the operating system once
    // copied: the old and the new session together take little more than the larger of them.
    for (const ParamInfo& e : to.table().entries()) {
      if (!owns(now, e, L)) continue;
      for (auto get : {&NamedTensors::param, &NamedTensors::m, &NamedTensors::v}) {
        const std::span<float> src = (from.*get)(e.name);
        if (get == &NamedTensors::param || owns(next[me], e, L)) std::ranges::copy(src, (to.*get)(e.name).begin());
        release_pages(src.data(), src.size_bytes());
      }
    }
  });
  held_ = next;
}

UnitCosts PipelineStep::measure_costs() {
  const GPT& held = session_.model();
  const ModelConfig config = held.config();
  const std::vector<bool> recompute = held.recompute();
  const int B = settings_.train.batch_size, T = settings_.train.seq_len, C = config.n_embd, L = config.n_layer;
  const size_t N = size_t(B) * T;
  std::vector<int32_t> tokens(N, 0), targets(N, 0);
  std::vector<float> x(N * C), dy(N * C);
  for (size_t i = 0; i < x.size(); ++i) {  // activations and gradients of a plausible size
    x[i] = 0.5f * std::sin(0.37f * float(i % 9973));
    dy[i] = 1e-3f * std::cos(0.61f * float(i % 8191));
  }
  // The fastest of three forward and backward passes of one micro-batch through a model of
  // `unit` alone (the cost does not depend on the weights' values): every rank times every unit
  // at the same time, whatever blocks it holds, so that ranks that share cores load them alike.
  auto time_unit = [&](const BlockRange& unit) {
    GPT model(config, unit);
    model.plan(B, T, recompute);
    const GPT::RangeInput in{unit.embeddings ? tokens.data() : nullptr,
                             unit.embeddings ? nullptr : x.data(), unit.begin};
    double forward = INFINITY, backward = INFINITY;
    for (int repeat = 0; repeat < 3; ++repeat) {
      Timer f;
      model.forward_range(in, targets.data(), 1.0f, 0);
      forward = std::min(forward, f.seconds());
      Timer b;
      model.backward_range(unit.head ? nullptr : dy.data());
      backward = std::min(backward, b.seconds());
    }
    return std::pair{forward, backward};
  };
  UnitCosts c;
  c.block_forward.resize(L);
  c.block_backward.resize(L);
  for (int l = 0; l < L; ++l) std::tie(c.block_forward[l], c.block_backward[l]) = time_unit({l, l + 1, false, false});
  const auto [ef, eb] = time_unit({0, 1, true, false});
  const auto [hf, hb] = time_unit({L - 1, L, false, true});
  c.embeddings_forward = std::max(0.0, ef - c.block_forward[0]);
  c.embeddings_backward = std::max(0.0, eb - c.block_backward[0]);
  c.head_forward = std::max(0.0, hf - c.block_forward[L - 1]);
  c.head_backward = std::max(0.0, hb - c.block_backward[L - 1]);
  // The mean over the ranks, so that every rank decides the same layout.
  std::vector<double> all{c.embeddings_forward, c.embeddings_backward, c.head_forward, c.head_backward};
  all.insert(all.end(), c.block_forward.begin(), c.block_forward.end());
  all.insert(all.end(), c.block_backward.begin(), c.block_backward.end());
  all = world_.sum(all);
  for (double& v : all) v /= world_.size();
  c.embeddings_forward = all[0];
  c.embeddings_backward = all[1];
  c.head_forward = all[2];
  c.head_backward = all[3];
  std::copy(all.begin() + 4, all.begin() + 4 + L, c.block_forward.begin());
  std::copy(all.begin() + 4 + L, all.end(), c.block_backward.begin());
  return c;
}

void PipelineStep::apply(const PipelineLayout& layout) {
  const ModelConfig config = session_.model().config();
  const std::vector<bool> recompute = session_.model().recompute();
  const TrainSettings& t = settings_.train;
  layout_ = layout;
  applied_ = true;
  name_ = describe_layout(describe_shape(layout.stages, layout.replicas), layout.describe_blocks());
  mesh_.reset();  // before the new one: MPI_Comm_free is collective like the split
  mesh_ = std::make_unique<MpiMesh>(MeshShape::data_pipeline(layout.replicas, layout.stages, tensor_), base_);
  if (layout.stages == 1) {  // data parallelism: the DataParallelStep runs the steps
    hold(ranges(layout));
    session_.model().plan(t.batch_size, t.seq_len, recompute);
    dp_ = std::make_unique<DataParallelStep>(session_, methods_, dp_settings_, world_);
    dp_->set_num_samples(num_samples_);
    return;
  }
  dp_.reset();  // a pipeline again (after a reshape that made the model deeper)
  const int K = layout.stages, k = stage();
  per_replica_ = t.grad_accum / layout.replicas;
  slots_ = gpipe_ ? per_replica_ : std::min(K - k, per_replica_);
  // The stage's memory with its micro-batches in flight (the trainer checked one of the whole model, or
  // of its tensor shard).
  const BlockRange stage_range = ranges(layout)[world_.rank()];
  // the stage's tensor shard (sequence parallelism: its rows of the residual stream)
  const ShardCoord shard{.rank = tensor_rank(), .size = tensor_, .sequence = settings_.parallel.sequence};
  const MemoryPlan plan = GPT::estimate_memory(config, t.batch_size, t.seq_len, recompute, stage_range,
                                               stage_range, slots_, shard, linear_dtype(t));
  const ParamTable stage_table = ParamTable::build(config, stage_range, shard);
  const size_t optimizer = 2 * sizeof(float) * (stage_table.total() - stage_table.owned_begin());  // AdamW's m and v
  const double needed = double(optimizer) + plan.parameters + plan.gradients + plan.activations + plan.scratch +
                        working_copy_bound(plan, t);
  FRUGAL_CHECK(needed <= memory_limit_bytes(t), "pipeline stage {} (blocks [{}, {}), {} micro-batches "
               "in flight) needs more memory than the machine has available (or train.max_memory_mb allows): {}; use parallel.schedule = "
               "\"1f1b\" (at most K micro-batches in flight), fewer micro-batches (train.grad_accum) or "
               "train.recompute = \"all\"", k, stage_range.begin, stage_range.end, slots_, plan.describe(optimizer));
  stage_activation_bytes_ = plan.activations;
  std::vector<double> planned(world_.size(), 0.0);  // every rank's plan, for the start-up line
  planned[world_.rank()] = needed;
  stage_plan_bytes_ = world_.sum(planned);
  hold(ranges(layout));
  const size_t floats = static_cast<size_t>(shard.local_rows(double(t.batch_size) * t.seq_len)) * config.n_embd;
  act_in_.assign(floats, 0.0f);
  grad_in_.assign(floats, 0.0f);
  act_out_.assign(slots_, std::vector<float>(floats));
  grad_out_.assign(slots_, std::vector<float>(floats));
  act_sends_.assign(slots_, MPI_REQUEST_NULL);
  grad_sends_.assign(slots_, MPI_REQUEST_NULL);
  micro_.resize(per_replica_);
}

PipelineLayout PipelineStep::plan_layout() {
  const ModelConfig config = session_.model().config();
  const int L = config.n_layer, K = stages_for(L);
  if (balance_parameters_) {
    costs_ = parameter_costs(config);
  } else {  // the whole model leaves every rank (for its stage of an even cut) before the measurement
    PipelineLayout even{K, groups() / K, {}};
    for (int k = 0; k <= K; ++k) even.bounds.push_back(k * L / K);
    hold(ranges(even));
    costs_ = measure_costs();
  }
  measured_ = true;
  const int frozen = session_.model().frozen_prefix();
  limit_ = can_partition(L, frozen, K) ? slowest_stage(costs_, frozen, balance_stages(costs_, frozen, K)) : 0;
  layout_frozen_ = frozen;
  layout_reshapes_ = session_.reshapes();
  const PipelineLayout layout = autopipe(costs_, frozen, K, groups(), limit_, elastic_);
  apply(layout);
  return layout;
}

int PipelineStep::stages_for(int n_layer) const {
  int stages = std::min(settings_.parallel.pipeline_stages, n_layer);
  while (groups() % stages != 0) --stages;
  return stages;
}

StepResult PipelineStep::run(int64_t step, const BatchSource& next_batch, nlohmann::json* record) {
  if (!applied_) start();
  hold(ranges(layout_));  // back to the stage after a synchronize()
  if (dp_) {
    const StepResult r = dp_->run(step, next_batch, record);
    if (record) {
      (*record)["pipeline"] = {{"stages", 1}, {"replicas", layout_.replicas}};
      (*record)["pipeline_stages"] = 1;
      (*record)["pipeline_replicas"] = layout_.replicas;
      (*record)["pipeline_repartitions"] = repartitions_;
    }
    if (session_.reshapes() != layout_reshapes_) follow_reshape(step, record);
    return r;
  }
  const StepResult r = run_events(step, next_batch, record);
  if (session_.reshapes() != layout_reshapes_)
    follow_reshape(step, record);
  else if (session_.model().frozen_prefix() != layout_frozen_)
    repartition(step, record);
  return r;
}

void PipelineStep::reconfigure(TrainContext& ctx) {
  // A method that reshapes the model now maps every block: the methods act on the whole model,
  // gathered on every rank, alike everywhere (the next step holds the stage again, or
  // follow_reshape lays out a pipeline for the new model).
  if (methods_.acts_now(Event::Reconfigure, ctx, &Capabilities::changes_shapes)) synchronize();
  // A mask owner acting now chooses masks from whole linears: a stage of tensor shards gathers its
  // blocks (the next step cuts them again, the formats with them).
  if (tensor_ > 1 && methods_.acts_now(Event::Reconfigure, ctx, &Capabilities::owns_masks)) hold_tensor_shard(false);
  StepStrategy::reconfigure(ctx);
}

void PipelineStep::follow_reshape(int64_t step, nlohmann::json* record) {
  // Every rank holds the whole model now (gathered around the Reconfigure, or data parallel).
  const ModelConfig config = session_.model().config();  // a copy: plan_layout rebuilds the model
  held_.assign(world_.size(), BlockRange::whole(config));
  const PipelineLayout before = layout_;
  Timer timer;
  ++repartitions_;
  const PipelineLayout next = plan_layout();
  const double seconds = timer.seconds();
  record_repartition(record, {{"reshaped", config.n_layer}}, before, next, seconds);
  if (world_.is_writer())
    io::print("pipeline: after step {}, the model reshaped to {} blocks (width {}): {} -> {} (costliest "
              "stage {}; {:.0f} ms){}\n", step + 1, config.n_layer, config.n_embd, before.describe(),
              next.describe(), describe_cost(slowest_stage(costs_, layout_frozen_, next.bounds)), 1e3 * seconds,
              next.stages == 1 ? "" : describe_stage_plans());
}

void PipelineStep::forward(TrainContext& ctx, int64_t step, int micro, StepResult& r) {
  const TrainSettings& t = settings_.train;
  GPT& model = session_.model();
  const int k = stage(), K = layout_.stages, M = t.grad_accum;
  const int index = replica() * per_replica_ + micro;  // in one process's order
  MicroBatch& mb = micro_[micro];
  model.use_slot(slot_of(micro));
  GPT::RangeInput in;
  if (k == 0) {  // the micro-batch's events fire where its tokens enter
    const int cached = begin_micro_batch(ctx, micro, mb.inputs.data(), mb.targets.data(), mb.ids.data(), r);
    in = {mb.inputs.data(), ctx.prefix_output, cached};
  } else {
    receive(act_in_.data(), k - 1, kActivationTag, fmt::format("the activations of micro-batch {}", index));
    in = {nullptr, act_in_.data(), layout_.bounds[k]};
  }
  Timer busy;
  const float loss = model.forward_range(in, mb.targets.data(), 1.0f / M, dropout_key(step, M, index));
  busy_ += busy.seconds();
  if (k == 0) {
    ctx.loss = 0;  // known on the last stage only
    methods_.fire(Event::AfterForward, ctx);
  }
  if (k == K - 1)
    losses_[micro] = loss;
  else
    send(act_out_[slot_of(micro)], act_sends_[slot_of(micro)], model.output(), k + 1, kActivationTag);
}

void PipelineStep::backward(TrainContext& ctx, int micro) {
  GPT& model = session_.model();
  const int k = stage(), K = layout_.stages;
  model.use_slot(slot_of(micro));
  if (k == 0) {
    ctx.micro = micro;
    methods_.fire(Event::BeforeBackward, ctx);
  }
  if (k < K - 1) receive(grad_in_.data(), k + 1, kGradientTag, fmt::format("the gradients of micro-batch {}", micro));
  Timer busy;
  model.backward_range(k < K - 1 ? grad_in_.data() : nullptr);
  busy_ += busy.seconds();
  if (k == 0) methods_.fire(Event::AfterBackward, ctx);
  if (k > 0) {
    const float* dinput = model.input_grad();
    FRUGAL_CHECK(dinput, "internal: pipeline stage {} has no input gradient (frozen prefix {})", k,
                 model.frozen_prefix());
    send(grad_out_[slot_of(micro)], grad_sends_[slot_of(micro)], dinput, k - 1, kGradientTag);
  }
}

void PipelineStep::send(std::vector<float>& buffer, MPI_Request& request, const float* data, int to, int tag) {
  if (request != MPI_REQUEST_NULL) world_.wait(request, "a pipeline send to the next stage");
  const size_t n = buffer.size();
  if (wire_ == kernels::DType::BF16)
    kernels::f32_to_bf16(reinterpret_cast<kernels::bf16*>(buffer.data()), data, n);
  else
    std::memcpy(buffer.data(), data, sizeof(float) * n);
  bytes_sent_ += double(n) * kernels::dtype_size(wire_);
  MPI_Isend(buffer.data(), static_cast<int>(n), wire_type(wire_), to, tag, pipe(), &request);
}

void PipelineStep::receive(float* out, int from, int tag, const std::string& what) {
  const size_t n = act_in_.size();
  MPI_Request request;
  MPI_Irecv(wire_landing(out, n, wire_, received_), static_cast<int>(n), wire_type(wire_), from, tag, pipe(),
            &request);
  world_.wait(request, what);
  wire_arrived(out, n, wire_, received_);
}

void PipelineStep::wait_sends() {
  for (auto* requests : {&act_sends_, &grad_sends_})
    for (MPI_Request& request : *requests)
      if (request != MPI_REQUEST_NULL) world_.wait(request, "a pipeline send");
}

void PipelineStep::begin_context(TrainContext& ctx) {
  if (stage() == 0 && layout_.replicas > 1) {  // the micro-batch events fire on the first stages, the replicas in lockstep
    ctx.allgather_replicas = world_.allgather_over(replicas());
    ctx.replicas = layout_.replicas;
  }
  // The step-level events fire on every rank, each holding its stage's blocks: what a method
  // decides for a block (a mask, a gradient statistic) is made by the stage that holds it and
  // handed to the others of its pipeline (the replicas' stages decide alike).
  ctx.share_blocks = [this](std::span<const int> layers, std::vector<std::string>& blobs) {
    share_blocks(layers, blobs);
  };
  ctx.sum_over_parts = [this](std::span<double> values) {
    if (tensor_ > 1) tensor_comm_->sum_each(values);  // the stage's shards' parts, in rank order
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, pipe(), &request);
    world_.wait(request, "summing a method's per-block values over the pipeline's stages");
  };
}

void PipelineStep::share_blocks(std::span<const int> layers, std::vector<std::string>& blobs) {
  const BlockRange mine = held_[world_.rank()];
  // This rank's blobs of the blocks it holds, each as (index, bytes, blob), after every stage's.
  std::string packed;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!mine.contains(layers[i])) continue;
    const uint64_t header[2] = {i, blobs[i].size()};
    packed.append(reinterpret_cast<const char*>(header), sizeof header);
    packed += blobs[i];
  }
  const std::vector<std::string> all = world_.allgather_bytes(pipe(), packed, "sharing a method's per-block data "
                                                              "between the pipeline's stages");
  for (const std::string& theirs : all)
    for (size_t at = 0; at < theirs.size();) {
      uint64_t header[2];
      std::memcpy(header, theirs.data() + at, sizeof header);
      at += sizeof header;
      if (!mine.contains(layers[header[0]])) blobs[header[0]] = theirs.substr(at, header[1]);
      at += header[1];
    }
}

void PipelineStep::reset_gradients() {
  const TrainSettings& t = settings_.train;
  GPT& model = session_.model();
  const int k = stage(), K = layout_.stages;
  const BlockRange stage_range{layout_.bounds[k], layout_.bounds[k + 1], k == 0, k == K - 1};
  if (!(model.stage() == stage_range) || model.slots() != slots_ || model.batch() != t.batch_size ||
      model.seq_len() != t.seq_len)
    model.plan(t.batch_size, t.seq_len, model.recompute(), stage_range, slots_);
  model.zero_grad();
}

void PipelineStep::run_micro_batches(TrainContext& ctx, int64_t step, const BatchSource& next_batch,
                                     StepResult& r) {
  const TrainSettings& t = settings_.train;
  const int K = layout_.stages, M = t.grad_accum, N = world_.size();
  const int k = stage(), d = replica(), Mr = per_replica_;
  GPT& model = session_.model();
  // Every rank draws the step's M micro-batches in one-process order (the loaders stay together);
  // replica d keeps d·Mr .. d·Mr + Mr − 1.
  for (int i = 0; i < M; ++i) {
    draw(next_batch);
    if (i / Mr != d) continue;
    MicroBatch& mb = micro_[i % Mr];
    mb.inputs = inputs_;
    mb.targets = targets_;
    mb.ids = ids_;
  }
  losses_.assign(Mr, 0.0);
  busy_ = 0;
  bytes_sent_ = 0;
  Timer schedule;
  if (gpipe_) {  // every forward, then every backward (in order: gradients add up as in one process)
    for (int j = 0; j < Mr; ++j) forward(ctx, step, j, r);
    for (int j = 0; j < Mr; ++j) backward(ctx, j);
  } else {  // 1F1B: K − k − 1 forwards in flight, then one forward and one backward in turn
    const int warmup = std::min(K - k - 1, Mr);
    for (int j = 0; j < warmup; ++j) forward(ctx, step, j, r);
    for (int j = 0; j + warmup < Mr; ++j) {
      forward(ctx, step, j + warmup, r);
      backward(ctx, j);
    }
    for (int j = Mr - warmup; j < Mr; ++j) backward(ctx, j);
  }
  wait_sends();
  const double schedule_seconds = schedule.seconds();

  // A tied head: the last stage's gradient of the token embedding (its head part) joins the first's.
  if (tied_exchange()) {
    // In pieces of kTiedPiece floats: the first stage adds each as it arrives, so it holds one
    // piece beyond its stage rather than a second (V, C) matrix.
    const auto [wte_begin, wte_end] = model.token_embedding_range();
    for (size_t begin = wte_begin; begin < wte_end; begin += kTiedPiece) {
      const int count = static_cast<int>(std::min(kTiedPiece, wte_end - begin));
      MPI_Request request;
      if (k == K - 1) {
        MPI_Isend(model.grads() + begin, count, MPI_FLOAT, 0, kTiedTag, pipe(), &request);
        world_.wait(request, "the head's token-embedding gradient");
      } else if (k == 0) {
        head_grad_.resize(kTiedPiece);
        MPI_Irecv(head_grad_.data(), count, MPI_FLOAT, K - 1, kTiedTag, pipe(), &request);
        world_.wait(request, "the head's token-embedding gradient");
        float* g = model.grads() + begin;
        for (int i = 0; i < count; ++i) g[i] += head_grad_[i];
      }
    }
  }
  const auto [slice_begin, hi] = slice();
  lo_ = std::max(model.trainable_begin(), slice_begin);
  hi_ = hi;
  if (layout_.replicas > 1 && lo_ < hi_)  // the stage's replicas sum their gradients
    all_reduce_sum(world_, replicas(), model.grads() + lo_, hi_ - lo_, comm_dtype(settings_.parallel), staged_,
                   "the all-reduce of a stage's gradients over its replicas");
  // A method reading whole linears' gradients at this AfterGradReduce (mst's growth): a stage of
  // tensor shards gathers its blocks with their gradients until the clip.
  if (tensor_ > 1 && methods_.reads_all_gradients_now(ctx, true)) hold_tensor_shard(false, true);

  // Every micro-batch's loss (from the last stages), in one-process order, the FLOPs (counted by
  // the first stages), each rank's busy and schedule seconds and the floats its session holds:
  // one sum over the ranks, where each value comes from one rank and the others add zeros; and
  // the bytes of the stages' messages, every rank's added.
  std::vector<double> v(M + 8 + 3 * N + 1, 0.0);
  if (k == K - 1 && tensor_rank() == 0)  // a stage's tensor ranks all have them
    for (int j = 0; j < Mr; ++j) v[d * Mr + j] = losses_[j];
  if (k == 0) {  // with tensor parallelism, each rank its shard's
    const double flops[8] = {r.executed.forward, r.executed.backward_input, r.executed.backward_weight,
                             r.executed.optimizer, r.dense.forward, r.dense.backward_input,
                             r.dense.backward_weight, r.dense.optimizer};
    std::copy(flops, flops + 8, v.begin() + M);
  }
  const int me = world_.rank();
  v[M + 8 + me] = busy_;
  v[M + 8 + N + me] = schedule_seconds;
  v[M + 8 + 2 * N + me] = static_cast<double>(model.num_floats());
  v.back() = bytes_sent_;
  v = world_.sum(v);
  bytes_sent_ = v.back();
  r.loss = 0;
  for (int i = 0; i < M; ++i) r.loss += v[i];
  r.loss /= M;
  r.executed = {v[M], v[M + 1], v[M + 2], v[M + 3]};
  r.dense = {v[M + 4], v[M + 5], v[M + 6], v[M + 7]};
  rank_busy_.assign(v.begin() + M + 8, v.begin() + M + 8 + N);
  rank_schedule_.assign(v.begin() + M + 8 + N, v.begin() + M + 8 + 2 * N);
  rank_floats_.assign(v.begin() + M + 8 + 2 * N, v.end() - 1);
}

std::string PipelineStep::describe_stage_plans() const {
  std::string plans;
  for (int k = 0; k < layout_.stages; ++k)  // replica 0's ranks
    plans += fmt::format("{}{:.0f}", k ? ", " : "", stage_plan_bytes_[k] / 1048576.0);
  return fmt::format("; memory plan per stage {} MiB (stage 0: {:.1f} MiB of activations for {} micro-batches "
                     "in flight)", plans, stage_activation_bytes_ / 1048576.0, slots_);
}

bool PipelineStep::tied_exchange() const {
  const int k = stage(), K = layout_.stages;
  return session_.model().config().tied_head && session_.model().frozen_prefix() == 0 && (k == 0 || k == K - 1);
}

float PipelineStep::clip_gradients() {
  if (tensor_ > 1) hold_tensor_shard(true, true);  // back to the shard if a method read the gradients whole
  GPT& model = session_.model();
  const float norm = tensor_ > 1 ? tensor_grad_norm(world_, pipe(), *tensor_comm_, model.table(), model.grads(), lo_, hi_)
                                 : chained_grad_norm(world_, pipe(), model.grads(), lo_, hi_);
  if (lo_ < hi_) session_.optim().clip_to(model.grads(), lo_, norm, hi_);
  return norm;
}

void PipelineStep::update(float lr) {
  GPT& model = session_.model();
  // the bf16 working copies of a bf16 model are written by the update (GPT::update_params)
  model.update_params([&](float* params, const std::vector<WorkingCopy>& copies) {
    session_.optim().update(params, model.grads(), lo_, lr, hi_, copies);
  });
  if (tied_exchange()) {  // the head on the last stage reads the token embedding the first stage updated
    const auto [wte_begin, wte_end] = model.token_embedding_range();
    const int count = static_cast<int>(wte_end - wte_begin), K = layout_.stages;
    MPI_Request request;
    if (stage() == 0)
      MPI_Isend(model.params() + wte_begin, count, MPI_FLOAT, K - 1, kTiedTag, pipe(), &request);
    else
      MPI_Irecv(model.params() + wte_begin, count, MPI_FLOAT, 0, kTiedTag, pipe(), &request);
    world_.wait(request, "the updated token embedding");
  }
}

void PipelineStep::add_metrics(nlohmann::json& record) {
  // Per stage (replica 0's ranks): busy seconds, the bubble (the share of the schedule idle) and
  // the floats of weights (as many of gradients, twice as many of moments) its session holds.
  const int K = layout_.stages, D = layout_.replicas, Mr = per_replica_;
  std::vector<double> busy(K), bubble(K), held(K);
  double mean_bubble = 0;
  for (int s = 0; s < K; ++s) {
    const int rank = mesh_->shape().rank_of({0, s, 0, 0});
    busy[s] = rank_busy_[rank];
    bubble[s] = 1.0 - busy[s] / std::max(1e-12, rank_schedule_[rank]);
    held[s] = rank_floats_[rank];
    mean_bubble += bubble[s] / K;
  }
  record["pipeline"] = {{"stages", K}, {"replicas", D}, {"bounds", layout_.bounds},
                        {"busy_s", busy}, {"bubble", mean_bubble}, {"stage_bubble", bubble},
                        {"bubble_ideal", double(K - 1) / (Mr + K - 1)}, {"held_floats", held},
                        {"bytes_sent", bytes_sent_}};
  record["pipeline_stages"] = K;  // top level and numeric: `frugal report` plots them
  record["pipeline_replicas"] = D;
  record["pipeline_repartitions"] = repartitions_;
  status_ = fmt::format(" | {}×{} bubble {:.0f}% (ideal {:.0f}%)", K, D, 100 * mean_bubble,
                        100.0 * (K - 1) / (Mr + K - 1));
}

void PipelineStep::synchronize() {
  hold(std::vector<BlockRange>(world_.size(), BlockRange::whole(session_.model().config())));
}

CheckpointRole PipelineStep::prepare_checkpoint() {
  if (!sharded_) return StepStrategy::prepare_checkpoint();
  return {.sharded = true, .writes = replica() == 0};
}

void PipelineStep::start() {
  if (!measured_) {
    const PipelineLayout start = plan_layout();
    if (world_.is_writer())
      io::print("pipeline: {} (costliest stage {}){}\n", start.describe(),
                describe_cost(slowest_stage(costs_, layout_frozen_, start.bounds)),
                start.stages == 1 ? "" : describe_stage_plans());
  } else {
    layout_reshapes_ = session_.reshapes();  // the checkpoint's layout was made for its model
    apply(layout_);
  }
}

bool PipelineStep::cut_to_parts() {
  if (tensor_ == 1 || applied_) return false;
  start();
  return sharded_;
}

std::optional<StepStrategy::Evaluation> PipelineStep::evaluation() {
  if (!sharded_) return std::nullopt;
  const auto forward = [this](const int32_t* inputs, const int32_t* targets) -> std::optional<double> {
    GPT& model = session_.model();
    const int k = stage(), K = layout_.stages;
    model.use_slot(0);  // between steps every slot is spent
    GPT::RangeInput in{inputs};
    if (k > 0) {
      receive(act_in_.data(), k - 1, kActivationTag, "the activations of an evaluation batch");
      in = {nullptr, act_in_.data(), layout_.bounds[k]};
    }
    const float loss = model.forward_range(in, targets, 0.0f, 0);
    if (k == K - 1) return loss;
    send(act_out_[0], act_sends_[0], model.output(), k + 1, kActivationTag);
    return std::nullopt;
  };
  return Evaluation{&world_, {replica(), layout_.replicas, forward}};
}

void PipelineStep::repartition(int64_t step, nlohmann::json* record) {
  GPT& model = session_.model();
  const int frozen = model.frozen_prefix();
  Timer timer;
  const PipelineLayout before = layout_;
  // The blocks move to their new owners with their moments (apply); the step, learning rate,
  // frozen prefix and AdamW's step count are already the same everywhere.
  const std::vector<double> mine{double(step + 1), session_.lr(step + 1), double(frozen),
                                 double(session_.optim().steps_taken())};
  std::vector<double> all(mine.size() * world_.size());
  world_.allgather(mine.data(), mine.size(), all.data());
  for (int rank = 0; rank < world_.size(); ++rank)
    FRUGAL_CHECK(std::equal(mine.begin(), mine.end(), all.begin() + rank * mine.size()), "internal: rank "
                 "{} disagrees on the step, learning rate, frozen prefix or optimizer step at a "
                 "pipeline re-partition", rank);
  const PipelineLayout next = autopipe(costs_, frozen, layout_.stages, groups(), limit_, elastic_);
  layout_frozen_ = frozen;
  ++repartitions_;
  apply(next);
  const double seconds = timer.seconds();
  const double slowest = slowest_stage(costs_, frozen, next.bounds);
  record_repartition(record, {{"frozen", frozen}, {"slowest_stage_s", slowest}}, before, next, seconds);
  if (world_.is_writer())
    io::print("pipeline: after step {}, {} blocks frozen: {} -> {}{} (costliest stage {}, start {}; "
              "{:.0f} ms)\n", step + 1, frozen, before.describe(), next.describe(),
              next.replicas > before.replicas ? ", AutoDP" : "", describe_cost(slowest),
              describe_cost(limit_), 1e3 * seconds);
}

void PipelineStep::record_repartition(nlohmann::json* record, nlohmann::json cause, const PipelineLayout& before,
                                      const PipelineLayout& next, double seconds) const {
  if (!record) return;
  (*record)["event"] = "repartition";
  (*record)["pipeline_stages"] = next.stages;
  (*record)["pipeline_replicas"] = next.replicas;
  (*record)["pipeline_repartitions"] = repartitions_;
  cause.update({{"from", before.describe()}, {"to", next.describe()}, {"stages", next.stages},
                {"replicas", next.replicas}, {"bounds", next.bounds}, {"limit_s", limit_}, {"seconds", seconds}});
  (*record)["repartition"] = std::move(cause);
}

std::string PipelineStep::describe_cost(double cost) const {
  return balance_parameters_ ? fmt::format("{:.0f} MiB held", cost / 1048576.0)
                             : fmt::format("{:.1f} ms per micro-batch", 1e3 * cost);
}

nlohmann::json PipelineStep::save_state() const {
  if (!measured_) return nullptr;
  return {{"stages", layout_.stages}, {"replicas", layout_.replicas}, {"bounds", layout_.bounds},
          {"frozen", layout_frozen_}, {"limit_s", limit_}, {"costs", costs_to_json(costs_)},
          {"repartitions", repartitions_}};
}

void PipelineStep::load_state(const nlohmann::json& state) {
  if (state.is_null()) return;
  PipelineLayout layout;
  layout.stages = state.at("stages");
  layout.replicas = state.at("replicas");
  layout.bounds = state.at("bounds").get<std::vector<int>>();
  const int ranks = layout.stages * layout.replicas * tensor_;
  FRUGAL_CHECK(ranks == world_.size(), "the checkpoint's pipeline ({}{}) ran on {} ranks; resume it with "
               "mpirun -np {}", layout.describe(), tensor_ > 1 ? fmt::format(", tensor {}", tensor_) : "", ranks,
               ranks);
  layout_ = layout;
  layout_frozen_ = state.at("frozen");
  limit_ = state.at("limit_s");
  repartitions_ = state.at("repartitions");
  costs_ = costs_from_json(state.at("costs"));
  measured_ = true;
}

void PipelineStep::start_tensor_groups(const MethodSet& methods, int fewest_blocks) {
  check_tensor_parallel(settings_, world_.size());
  // A stage of one is data parallelism (DataParallelStep), which holds no tensor shards.
  FRUGAL_CHECK(stages_for(fewest_blocks) > 1, "a V-cycle level of {} blocks would run a pipeline of one stage, "
               "which parallel.tensor = {} does not run yet; keep every level at {} blocks or more "
               "(methods.multilevel) or set parallel.tensor = 1", fewest_blocks, tensor_,
               settings_.parallel.pipeline_stages);
  FRUGAL_CHECK(!elastic_ || std::ranges::none_of(methods.methods(), [](const auto& method) {
                 return method->capabilities().changes_trainable_set;
               }), "parallel.elastic = true with parallel.tensor = {} and a method that freezes blocks: "
               "AutoDP's one-stage layout does not hold tensor shards yet; set parallel.elastic = false "
               "(the stages are still re-balanced as blocks freeze)", tensor_);
  // The tensor groups never change (a re-partition changes data × pipeline only): T consecutive ranks.
  MPI_Comm_split(base_, world_.rank() / tensor_, world_.rank() % tensor_, &tensor_group_);
  tensor_comm_ = std::make_unique<MpiTensorCollectives>(world_, tensor_group_, settings_.parallel.sequence,
                                                       settings_.parallel.tensor_overlap, wire_);
}

void PipelineStep::hold_tensor_shard(bool sharded, bool gradients) {
  if (sharded == sharded_) return;
  hold_shard(session_, sharded, Placement::Kind::Sharded, *tensor_comm_,
             [this](const float* local, size_t n, float* out) { tensor_comm_->all_gather(local, n, out); },
             gradients);
  sharded_ = sharded;
}

std::string PipelineStep::describe_layout(const std::string& shape, const std::string& blocks) const {
  return fmt::format("pipeline of {}{}{}, {}", shape, tensor_ > 1 ? fmt::format(" × tensor {}", tensor_) : "",
                     blocks.empty() ? "" : ", " + blocks, gpipe_ ? "GPipe" : "1F1B");
}

}  // namespace frugal::parallel
