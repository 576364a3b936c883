// The pieces of ZeRO (stages 1 and 2) that the strategies sharding AdamW's moments and the
// gradients over a group of data-parallel replicas share (DataParallelStep over every rank,
// TensorParallelStep over each tensor shard's replicas): where each replica's shard of the flat
// buffer lies, gathering the updated shards, and a gradient buffer that keeps only its own shard's
// memory between steps.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

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

}  // namespace frugal::parallel
