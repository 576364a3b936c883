// The global gradient norm when consecutive slices of the flat gradient buffer live on consecutive
// ranks of a communicator (ZeRO-2 shards, pipeline stages): the sum of squares is streamed up the
// ranks in order (kernels::SumSquaresStream), so the result is one process's norm to the bit,
// and the last rank's answer comes back down to all.
#pragma once
#include <mpi.h>

#include <cstddef>

#include "frugal/parallel/mpi_world.h"

namespace frugal::parallel {

// The L2 norm over every rank's grads[lo, hi) of `comm` (rank order = buffer order; an empty
// slice, lo >= hi, feeds nothing). Every rank of `comm` calls it.
float chained_grad_norm(MpiWorld& world, MPI_Comm comm, const float* grads, size_t lo, size_t hi);

}  // namespace frugal::parallel
