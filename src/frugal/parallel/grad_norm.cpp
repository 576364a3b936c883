// The chained gradient norm; see grad_norm.h.
#include "frugal/parallel/grad_norm.h"

#include <cmath>

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

SplitSquares split_sum_squares(const ParamTable& table, const float* grads, size_t begin,
                               const std::function<bool(const ParamInfo&)>& is_split) {
  constexpr size_t kAlignFloats = kAlign / sizeof(float);
  kernels::SumSquaresStream split, replicated;
  for (const ParamInfo& e : table.entries()) {
    if (e.offset < begin) continue;  // frozen
    const size_t n = (e.numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    kernels::sum_squares_feed(is_split(e) ? split : replicated, grads + e.offset, n);
  }
  return {kernels::sum_squares_finish(split), kernels::sum_squares_finish(replicated)};
}

}  // namespace frugal::parallel
