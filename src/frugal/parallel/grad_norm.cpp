// The chained gradient norm; see grad_norm.h.
#include "frugal/parallel/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "frugal/core/memory.h"
#include "frugal/kernels/ops.h"

namespace frugal::parallel {

float chained_grad_norm(MpiWorld& world, MPI_Comm comm, const float* grads, size_t lo, size_t hi) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  kernels::SumSquaresStream stream;
  MPI_Request request;
  if (rank > 0) {
    MPI_Irecv(&stream, sizeof stream, MPI_BYTE, rank - 1, 0, comm, &request);
    world.wait(request, "the gradient norm");
  }
  if (lo < hi) kernels::sum_squares_feed(stream, grads + lo, hi - lo);
  double sum = 0;
  if (rank + 1 < size) {
    MPI_Isend(&stream, sizeof stream, MPI_BYTE, rank + 1, 0, comm, &request);
    world.wait(request, "the gradient norm");
  } else {
    sum = kernels::sum_squares_finish(stream);
  }
  MPI_Ibcast(&sum, 1, MPI_DOUBLE, size - 1, comm, &request);
  world.wait(request, "the gradient norm");
  return static_cast<float>(std::sqrt(sum));
}

namespace {

struct SplitStreams {
  kernels::SumSquaresStream split, replicated;
};

// Feeds each trainable tensor's part inside [lo, hi) (with its padding) to its stream.
void feed_split(SplitStreams& streams, const ParamTable& table, const float* grads, size_t lo, size_t hi,
                const std::function<bool(const ParamInfo&)>& is_split) {
  constexpr size_t kAlignFloats = kAlign / sizeof(float);
  for (const ParamInfo& e : table.entries()) {
    const size_t padded = (e.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    const size_t b = std::max(lo, e.offset), end = std::min(hi, e.offset + padded);
    if (b < end) kernels::sum_squares_feed(is_split(e) ? streams.split : streams.replicated, grads + b, end - b);
  }
}

}  // namespace

SplitSquares chained_split_squares(MpiWorld& world, MPI_Comm comm, const ParamTable& table, const float* grads,
                                   size_t lo, size_t hi, const std::function<bool(const ParamInfo&)>& is_split) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  SplitStreams streams;
  MPI_Request request;
  if (rank > 0) {
    MPI_Irecv(&streams, sizeof streams, MPI_BYTE, rank - 1, 0, comm, &request);
    world.wait(request, "the gradient norm");
  }
  feed_split(streams, table, grads, lo, hi, is_split);
  double sums[2] = {0, 0};
  if (rank + 1 < size) {
    MPI_Isend(&streams, sizeof streams, MPI_BYTE, rank + 1, 0, comm, &request);
    world.wait(request, "the gradient norm");
  } else {
    sums[0] = kernels::sum_squares_finish(streams.split);
    sums[1] = kernels::sum_squares_finish(streams.replicated);
  }
  MPI_Ibcast(sums, 2, MPI_DOUBLE, size - 1, comm, &request);
  world.wait(request, "the gradient norm");
  return {sums[0], sums[1]};
}

float sharded_grad_norm(MpiWorld& world, MPI_Comm chain, const ParamTable& table, const float* grads, size_t lo,
                        size_t hi, const std::function<bool(const ParamInfo&)>& is_split,
                        const std::function<double(double)>& group_sum) {
  const SplitSquares squares = chained_split_squares(world, chain, table, grads, lo, hi, is_split);
  return static_cast<float>(std::sqrt(group_sum(squares.split) + squares.replicated));
}

}  // namespace frugal::parallel
