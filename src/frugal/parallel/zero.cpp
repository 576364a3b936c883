// The shared pieces of ZeRO; see zero.h.
#include "frugal/parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "frugal/core/memory.h"
#include "frugal/optim/muon.h"
#include "frugal/parallel/wire.h"

namespace frugal::parallel {

std::vector<size_t> zero_shard_bounds(const ParamTable& table, int ranks, bool muon) {
  const size_t total = table.total();
  std::vector<size_t> bounds(ranks + 1);
  for (int r = 0; r < ranks; ++r) {
    bounds[r] = total * r / ranks / 16 * 16;
    if (muon)
      for (const ParamInfo& e : table.entries())
        if (muon_matrices(e).count > 0 && e.offset < bounds[r] && bounds[r] < e.offset + e.numel) bounds[r] = e.offset;
  }
  bounds[ranks] = total;
  return bounds;
}

void allgather_shards(MpiWorld& world, MPI_Comm comm, const std::vector<size_t>& bounds, float* buffer,
                      size_t begin, const char* what) {
  const int n = static_cast<int>(bounds.size()) - 1;
  std::vector<int> counts(n), displs(n);
  for (int r = 0; r < n; ++r) {
    const size_t lo = std::max(begin, bounds[r]), hi = std::max(lo, bounds[r + 1]);
    counts[r] = static_cast<int>(hi - lo);
    displs[r] = static_cast<int>(lo - begin);
  }
  MPI_Request request;
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buffer + begin, counts.data(), displs.data(), MPI_FLOAT, comm,
                  &request);
  world.wait(request, what);
}

void gather_moments(MpiWorld& world, MPI_Comm comm, const std::vector<size_t>& bounds, Session& session) {
  AdamW& shard = session.optim();
  const size_t first = session.model().table().owned_begin(), total = session.model().table().total();
  const size_t lo = shard.shard_begin(), n = shard.shard_end() - lo;
  const auto gather = [&](const float* moment) {  // indexed like the flat buffer
    std::vector<float> whole(total);
    std::copy_n(moment, n, whole.data() + lo);
    allgather_shards(world, comm, bounds, whole.data(), first, "the all-gather of AdamW's moments");
    return whole;
  };
  const std::vector<float> m = gather(shard.m()), v = gather(shard.v());
  session.reshard_optimizer(first, total, m.data() + first, v.data() + first);
}

void cut_moments(Session& session, size_t begin, size_t end) {
  if (session.optim().steps_taken() == 0) return session.shard_optimizer(begin, end);
  AdamW& whole = session.optim();
  const size_t first = session.model().table().owned_begin(), total = session.model().table().total();
  const std::vector<float> m(whole.m(), whole.m() + (total - first)), v(whole.v(), whole.v() + (total - first));
  session.reshard_optimizer(begin, end, m.data(), v.data());
}

void zero_keeping_shard(float* grads, size_t begin, size_t total, size_t own_begin, size_t own_end) {
  const size_t own = std::clamp(own_begin, begin, total), end = std::clamp(own_end, own, total);
  zero_releasing_pages(grads + begin, sizeof(float) * (own - begin));
  std::memset(grads + own, 0, sizeof(float) * (end - own));
  zero_releasing_pages(grads + end, sizeof(float) * (total - end));
}

ZeroOverReplicas::ZeroOverReplicas(MpiWorld& world, MPI_Comm replicas, int stage, const ParamTable& shard,
                                   bool muon, kernels::DType wire)
    : world_(world), replicas_(replicas), stage_(stage), wire_(wire) {
  int size = 1;
  MPI_Comm_size(replicas, &size);
  MPI_Comm_rank(replicas, &replica_);
  bounds_ = zero_shard_bounds(shard, size, muon);
}

void ZeroOverReplicas::before_gather(Session& session) {
  if (stage_ > 0) gather_moments(world_, replicas_, bounds_, session);
}

void ZeroOverReplicas::after_cut(Session& session) {
  if (stage_ > 0) cut_moments(session, bounds_[replica_], bounds_[replica_ + 1]);
}

size_t ZeroOverReplicas::optimizer_bytes(const ParamTable& shard) const {
  const size_t first = shard.owned_begin(), total = shard.total();
  const size_t floats = stage_ > 0 ? bounds_[replica_ + 1] - std::max(first, bounds_[replica_]) : total - first;
  return 2 * floats * sizeof(float);
}

size_t ZeroOverReplicas::resident_gradient_bytes(const ParamTable& shard) const {
  if (stage_ < 2) return shard.total() * sizeof(float);
  return (bounds_[replica_ + 1] - bounds_[replica_]) * sizeof(float);
}

void ZeroOverReplicas::reset_gradients(GPT& model) const {
  if (stage_ < 2) return model.zero_grad();
  zero_keeping_shard(model.grads(), model.trainable_begin(), model.num_floats(), bounds_[replica_],
                     bounds_[replica_ + 1]);
}

size_t ZeroOverReplicas::sum_gradients(GPT& model, const char* what) {
  const size_t begin = model.trainable_begin(), total = model.num_floats();
  if (replicas() == 1 || begin >= total) return 0;
  if (stage_ == 2)
    reduce_scatter_sum(world_, replicas_, model.grads(), begin, total, bounds_, wire_, staged_, counts_, what);
  else
    all_reduce_sum(world_, replicas_, model.grads() + begin, total - begin, wire_, staged_, what);
  return total - begin;
}

void ZeroOverReplicas::share_gradients(GPT& model) const {
  if (stage_ == 2 && replicas() > 1)
    allgather_shards(world_, replicas_, bounds_, model.grads(), model.trainable_begin(),
                     "the all-gather of the gradients' parts for a method that reads them all");
}

ZeroOverReplicas::Held ZeroOverReplicas::held_gradients(const GPT& model) const {
  const size_t begin = model.trainable_begin(), total = model.num_floats();
  if (stage_ < 2) return {begin, total, MPI_COMM_SELF};
  return {std::max(begin, bounds_[replica_]), bounds_[replica_ + 1], replicas_};
}

void ZeroOverReplicas::share_updates(GPT& model) const {
  if (stage_ > 0)
    allgather_shards(world_, replicas_, bounds_, model.params(), model.trainable_begin(),
                     "the all-gather of the updated parameters over the replicas");
}

}  // namespace frugal::parallel
