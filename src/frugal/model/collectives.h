// TensorCollectives: the communication a block needs when its tensors are split over a
// tensor-parallel group, called at the points the block defines (model/block.h): the sum of the
// partial outputs of a row-parallel linear in the forward, and of the partial input gradients of
// column-parallel linears in the backward. The model layer knows no MPI: one process uses
// SoloCollectives (a group of one: nothing to do), and parallel/ implements the interface over a
// communicator of the mesh's tensor dimension.
#pragma once
#include <cstddef>

#include "frugal/model/spec.h"

namespace frugal {

class TensorCollectives {
 public:
  virtual ~TensorCollectives() = default;
  // This rank's place in the group.
  virtual ShardCoord coord() const = 0;
  // x (n floats) = the sum of every rank's x, the same bits on every rank.
  virtual void all_reduce_sum(float* x, size_t n) = 0;
};

// A group of one process.
class SoloCollectives final : public TensorCollectives {
 public:
  ShardCoord coord() const override { return {}; }
  void all_reduce_sum(float*, size_t) override {}
};

}  // namespace frugal
