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

// Σ g² of the trainable tensors of `table` in [lo, hi) in two sums: of the tensors
// split over a group (`is_split`: each rank holds other parts; their sums are to be added over the
// group) and of the replicated ones (the same on every rank: counted once). Each tensor is fed with
// its alignment padding (zero), so every piece is whole groups of 8 as the stream needs.
// The slices grads[lo, hi) of the buffer live on consecutive ranks of `comm` (ZeRO-2 parts of a
// shard, the stages of a pipeline of tensor groups; MPI_COMM_SELF: one slice): both streams are
// chained up the ranks in order, so the sums are those over the whole buffer to the bit; every
// rank gets them. lo and hi fall on multiples of 8 floats.
struct SplitSquares {
  double split = 0, replicated = 0;
};
SplitSquares chained_split_squares(MpiWorld& world, MPI_Comm comm, const ParamTable& table, const float* grads,
                                   size_t lo, size_t hi, const std::function<bool(const ParamInfo&)>& is_split);
// The global norm of a sharded layout from those sums: the split tensors' squares added over their
// group by `group_sum` (the same bits on every rank), the replicated ones' once.
float sharded_grad_norm(MpiWorld& world, MPI_Comm chain, const ParamTable& table, const float* grads, size_t lo,
                        size_t hi, const std::function<bool(const ParamInfo&)>& is_split,
                        const std::function<double(double)>& group_sum);

}  // namespace frugal::parallel
