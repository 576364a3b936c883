// The pieces of ZeRO (stages 1 and 2) that the strategies sharding AdamW's moments and the
// gradients over a group of data-parallel replicas share (DataParallelStep over every rank,
// TensorParallelStep and ExpertParallelStep over the replicas of each shard): where each
// replica's shard of the flat buffer lies, gathering the updated shards, and a gradient buffer
// that keeps only its own shard's memory between steps; ZeroOverReplicas puts them together for
// the replicas of a model shard.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/model/param_table.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/session/session.h"

namespace frugal::parallel {

// Rank r's ZeRO shard begins at bounds[r]: `ranks` nearly equal pieces of the flat buffer of
// `table`, cut at multiples of 16 floats (the parameter table aligns every tensor so, so a shard's
// part of the gradient-norm stream is whole groups of 8). With Muon, a cut inside a Muon matrix
// moves to the matrix's start, so each rank orthogonalises whole matrices it owns (AdamW's
// element-wise update can be cut anywhere).
std::vector<size_t> zero_shard_bounds(const ParamTable& table, int ranks, bool muon);

// Gathers every rank's shard of buffer[begin, bounds.back()) (rank r's is [bounds[r],
// bounds[r + 1]) of a buffer indexed like the flat parameter buffer) onto every rank of `comm`,
// in place. Every rank of `comm` calls it.
void allgather_shards(MpiWorld& world, MPI_Comm comm, const std::vector<size_t>& bounds, float* buffer,
                      size_t begin, const char* what);

// Makes the session's optimizer whole on every rank of `comm`: each rank's shard of AdamW's moments
// (rank r's [bounds[r], bounds[r + 1])) gathered, the step count kept. Every rank of `comm` calls it.
void gather_moments(MpiWorld& world, MPI_Comm comm, const std::vector<size_t>& bounds, Session& session);
// Cuts the session's whole optimizer to the shard [begin, end), its moments copied (before the
// first step, when there are none, a fresh shard).
void cut_moments(Session& session, size_t begin, size_t end);

// zero_grad for ZeRO-2: grads[begin, total) zero, where only [own_begin, own_end) keeps its pages;
// the rest is released until the next backward writes it.
void zero_keeping_shard(float* grads, size_t begin, size_t total, size_t own_begin, size_t own_end);

// The replicas of a model shard (a tensor or expert shard, the same on the D ranks of `replicas`)
// and what ZeRO stage `stage` makes of them: stage 0 plain replicas (the gradients all-reduced);
// 1 AdamW's moments split in D parts of the shard's flat buffer (zero_shard_bounds), replica d
// updating part d and the parts all-gathered after the update; 2 also the gradients, each replica
// getting only its part's sums (a reduce-scatter) and keeping only its part's pages between steps.
// Every replica of `replicas` makes the same calls.
class ZeroOverReplicas {
 public:
  ZeroOverReplicas(MpiWorld& world, MPI_Comm replicas, int stage, const ParamTable& shard, bool muon,
                   kernels::DType wire);
  int stage() const { return stage_; }
  int replicas() const { return static_cast<int>(bounds_.size()) - 1; }
  int replica() const { return replica_; }

  // Around making the session whole (its moments gathered first) and cutting it to the shard
  // (its moments cut to this replica's part after).
  void before_gather(Session& session);
  void after_cut(Session& session);
  // This replica's AdamW state and resident gradients, in bytes, in the shard of `shard`.
  size_t optimizer_bytes(const ParamTable& shard) const;
  size_t resident_gradient_bytes(const ParamTable& shard) const;
  // zero_grad; under ZeRO-2 only this replica's part keeps its pages.
  void reset_gradients(GPT& model) const;
  // The shard's gradients [trainable_begin, end) summed over the replicas: all of them, or under
  // ZeRO-2 this replica's part. Returns the floats sent (0 with one replica).
  size_t sum_gradients(GPT& model, const char* what);
  // Under ZeRO-2: every part's sums to every replica, for a method that reads every gradient.
  void share_gradients(GPT& model) const;
  // The gradients this replica holds summed, [lo, hi), and the communicator its norm's partial
  // sums chain through (MPI_COMM_SELF unless the parts are split over the replicas).
  struct Held {
    size_t lo, hi;
    MPI_Comm chain;
  };
  Held held_gradients(const GPT& model) const;
  // After AdamW updated this replica's part: every replica gets every part (ZeRO-1/2).
  void share_updates(GPT& model) const;

 private:
  MpiWorld& world_;
  MPI_Comm replicas_;
  int stage_, replica_ = 0;
  kernels::DType wire_;
  std::vector<size_t> bounds_;         // replica d's part of the shard: [d], [d + 1]
  std::vector<kernels::bf16> staged_;  // the sum's bf16 payload on a bf16 wire (parallel/wire.h)
  std::vector<int> counts_;            // ZeRO-2's reduce-scatter: floats per replica
};

}  // namespace frugal::parallel
