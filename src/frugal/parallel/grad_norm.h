// The global gradient norm when consecutive slices of the flat gradient buffer live on consecutive
// ranks of a communicator (ZeRO-2 shards, pipeline stages): the sum of squares is streamed up the
// ranks in order (kernels::SumSquaresStream), so the result is one process's norm to the bit,
// and the last rank's answer comes back down to all.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <functional>

#include "frugal/model/param_table.h"
#include "frugal/parallel/mpi_world.h"

namespace frugal::parallel {

// The L2 norm over every rank's grads[lo, hi) of `comm` (rank order = buffer order; an empty
// slice, lo >= hi, feeds nothing). Every rank of `comm` calls it.
float chained_grad_norm(MpiWorld& world, MPI_Comm comm, const float* grads, size_t lo, size_t hi);

// Σ g² of the trainable tensors of `table` (offsets from `begin` on) in two sums: of the tensors
// split over a group (`is_split`: each rank holds other parts; their sums are to be added over the
// group) and of the replicated ones (the same on every rank: counted once). Each tensor is fed with
// its alignment padding (zero), so every piece is whole groups of 8 as the stream needs.
struct SplitSquares {
  double split = 0, replicated = 0;
};
SplitSquares split_sum_squares(const ParamTable& table, const float* grads, size_t begin,
                               const std::function<bool(const ParamInfo&)>& is_split);
// The same two sums when consecutive slices grads[lo, hi) of the buffer live on consecutive ranks
// of `comm` (ZeRO-2 shards of a tensor shard, the stages of a pipeline of tensor groups): both
// streams chained up the ranks in order, so the sums are those of split_sum_squares over the whole
// buffer to the bit; every rank gets them. lo and hi fall on multiples of 8 floats.
SplitSquares chained_split_squares(MpiWorld& world, MPI_Comm comm, const ParamTable& table, const float* grads,
                                   size_t lo, size_t hi, const std::function<bool(const ParamInfo&)>& is_split);

}  // namespace frugal::parallel
