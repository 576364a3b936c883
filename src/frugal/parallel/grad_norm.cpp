// The chained gradient norm; see grad_norm.h.
#include "frugal/parallel/grad_norm.h"

#include <cmath>

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

}  // namespace frugal::parallel
