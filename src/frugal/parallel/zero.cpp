// The shared pieces of ZeRO; see zero.h.
#include "frugal/parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "frugal/core/memory.h"
#include "frugal/optim/muon.h"

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

}  // namespace frugal::parallel
