// TensorCollectives: the communication a model needs when its tensors are split over a
// tensor-parallel group, called at the points its components define: the sum of the partial
// outputs of a row-parallel linear in the forward, and of the partial input gradients of
// column-parallel linears in the backward (model/block.h); the token embedding's rows gathered by
// a sum, and the vocabulary-parallel cross-entropy's row maxima and sums (embedding.h, objective.h). The model layer knows no MPI: one process uses
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
  // x (n floats) = the elementwise maximum of every rank's x.
  virtual void all_reduce_max(float* x, size_t n) = 0;
};

// A group of one process.
class SoloCollectives final : public TensorCollectives {
 public:
  ShardCoord coord() const override { return {}; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_max(float*, size_t) override {}
};

}  // namespace frugal
