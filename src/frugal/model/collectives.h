// TensorCollectives: the communication a model needs when its tensors are split over a
// tensor-parallel group, called at the points its components define: the sum of the partial
// outputs of a row-parallel linear in the forward, and of the partial input gradients of
// column-parallel linears in the backward (model/block.h); the token embedding's rows gathered by
// a sum, and the vocabulary-parallel cross-entropy's row maxima and sums (embedding.h, objective.h).
// It also carries the expert-parallel group's all-to-all (model/moe.h): each rank sends the rows
// routed to another rank's experts there and receives their outputs back. The model layer knows
// no MPI: one process uses SoloCollectives (groups of one: nothing to do, the all-to-all is a
// copy), and parallel/ implements the interface over communicators of the mesh's tensor and
// expert dimensions.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "frugal/model/spec.h"

namespace frugal {

class TensorCollectives {
 public:
  virtual ~TensorCollectives() = default;
  // This rank's place in its tensor-parallel and expert-parallel groups.
  virtual ShardCoord coord() const = 0;
  // x (n floats) = the sum of every rank's x, the same bits on every rank.
  virtual void all_reduce_sum(float* x, size_t n) = 0;
  // x (n floats) = the elementwise maximum of every rank's x.
  virtual void all_reduce_max(float* x, size_t n) = 0;
  // The expert-parallel group's all-to-all of `per_rank` ints: send (size · per_rank) holds what
  // goes to each rank, in rank order; recv (size · per_rank) gets what each rank sent this one.
  // A group of one (the default): a copy.
  virtual void all_to_all(const int32_t* send, int32_t* recv, int per_rank) {
    std::copy_n(send, per_rank, recv);
  }
  // The same for rows of `width` floats in variable numbers: send_rows[r] consecutive rows of send
  // go to rank r, and recv gets recv_rows[s] rows from each rank s, in rank order (recv_rows: what
  // the ranks announced by all_to_all).
  virtual void all_to_all_rows(const float* send, const int32_t* send_rows, float* recv,
                               const int32_t* /*recv_rows*/, int width) {
    std::copy_n(send, size_t(send_rows[0]) * width, recv);
  }
};

// A group of one process.
class SoloCollectives final : public TensorCollectives {
 public:
  ShardCoord coord() const override { return {}; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_max(float*, size_t) override {}
};

}  // namespace frugal
