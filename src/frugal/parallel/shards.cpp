// The session's shard and the whole model; see shards.h.
#include "frugal/parallel/shards.h"

#include <algorithm>
#include <vector>

#include "frugal/core/memory.h"

namespace frugal::parallel {

void hold_shard(Session& session, bool sharded, Placement::Kind kind, TensorCollectives& comm,
                const AllGather& all_gather, bool gradients) {
  const ShardCoord coord = comm.coord();
  // rank r's place in the group `kind` splits over, its other places this rank's
  const auto rank_at = [&](int r) {
    ShardCoord at = coord;
    (kind == Placement::Kind::Experts ? at.expert_rank : at.rank) = r;
    return at;
  };
  // The routing the metrics have not taken yet stays with the model.
  const RoutingStats window = session.model().take_routing();
  // Between steps the gradients are spent: their memory goes before the new session takes its own.
  if (!gradients) release_pages(session.model().grads(), sizeof(float) * session.model().num_floats());
  session.repartition(session.model().range(), [&](const NamedTensors& from, const NamedTensors& to) {
    std::vector<float> parts;  // gathering: every rank's part of one tensor, in rank order
    for (const ParamInfo& e : to.table().entries()) {
      const ParamInfo& local = (sharded ? to : from).table().at(e.name);
      const int ranks = coord.group_of(e.placement).size;
      for (auto get : {&NamedTensors::param, &NamedTensors::m, &NamedTensors::v, &NamedTensors::grad}) {
        if (get == &NamedTensors::grad && !gradients) continue;
        const std::span<float> src = (from.*get)(e.name), dst = (to.*get)(e.name);
        if (dst.empty()) continue;  // no moments yet
        if (sharded) {
          e.copy_local(src.data(), dst.data(), coord);
        } else if (e.placement.kind != kind || ranks == 1) {
          std::ranges::copy(src, dst.begin());
        } else {
          parts.resize(local.numel * ranks);
          all_gather(src.data(), local.numel, parts.data());
          for (int r = 0; r < ranks; ++r) e.copy_global(parts.data() + r * local.numel, dst.data(), rank_at(r));
        }
        release_pages(src.data(), src.size_bytes());  // copied: the old session's memory goes as it is
      }
    }
  }, sharded ? &comm : nullptr);
  session.model().add_routing(window);
}

void drop_shard(Session& session) { session.repartition(session.model().range(), nullptr); }

}  // namespace frugal::parallel
