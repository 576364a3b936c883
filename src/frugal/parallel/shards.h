// Moving a session between the whole model and this rank's shard of it, for the strategies that
// split tensors over a group of ranks (tensor parallelism: Placement::Kind::Sharded; expert
// parallelism: Placement::Kind::Experts). The session becomes the shard before its weights are
// written (tensor parallelism without methods: StepStrategy::enter_parts), or starts whole
// (initialised or loaded as in one process) and becomes the shard at a strategy's first step, and
// is gathered whole again on every rank where the strategy needs it whole (expert parallelism:
// evaluation, checkpoints and samples; tensor parallelism: the samples and its methods'
// Reconfigures, its evaluations and checkpoints running on the shards).
#pragma once
#include <cstddef>
#include <functional>

#include "frugal/model/collectives.h"
#include "frugal/model/spec.h"
#include "frugal/session/session.h"

namespace frugal::parallel {

// Every rank's `n` floats of `local`, into out (size · n), in the group's rank order.
using AllGather = std::function<void(const float* local, size_t n, float* out)>;

// Rebuilds `session` around this rank's shard (sharded: the model built with `comm`, whose coord()
// places this rank; the tensors of placement `kind` cut to its part, weights and AdamW's moments)
// or around the whole model (gathered with all_gather over the group that `kind` splits over).
// With `gradients`, the step's gradients move along (cut or gathered like the weights): a method
// reads them whole mid-step; without, they are spent and the new model's start at zero.
void hold_shard(Session& session, bool sharded, Placement::Kind kind, TensorCollectives& comm,
                const AllGather& all_gather, bool gradients = false);

// What a strategy whose session holds a shard leaves when it ends: the whole of the session's block
// range, its weights and moments zero (the pages of which take no memory), built without `comm`,
// which goes with the strategy. No rank communicates, so it holds when an error is ending the run
// too; a caller that still needs the trained model synchronize()s before the strategy goes.
void drop_shard(Session& session);

}  // namespace frugal::parallel
