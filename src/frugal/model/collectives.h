// TensorCollectives: the communication a model needs when its tensors are split over a
// tensor-parallel group, called at the points its components define: the sum of the partial
// outputs of a row-parallel linear in the forward, and of the partial input gradients of
// column-parallel linears in the backward (model/block.h); the token embedding's rows gathered by
// a sum, and the vocabulary-parallel cross-entropy's row maxima and sums (embedding.h, objective.h).
// Under sequence parallelism (ShardCoord::sequence) the rows between the linears are split over
// the group: an all-gather of the rows joins them before a column-parallel linear (and the head),
// a reduce-scatter replaces the sum after a row-parallel one (and the embedding's lookup); the
// backward mirrors them (block.h). Those row messages (sum_rows, gather_rows) are the ones a
// group may send in bf16; the statistics and parameter-gradient sums stay fp32.
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
  // out (size · n floats) = every rank's `local` (n floats), in rank order: the rows the ranks hold
  // joined. A group of one: a copy.
  virtual void all_gather(const float* local, size_t n, float* out) { std::copy_n(local, n, out); }
  // out (n / size floats) = this rank's slice [rank · n / size, (rank + 1) · n / size) of the sum of
  // every rank's x (n floats; n divides by the group's size), added in rank order: the same bits as
  // all_reduce_sum's. out may be x (its first slice); x is undefined afterwards. A group of one: a copy.
  virtual void reduce_scatter_sum(float* x, size_t n, float* out) {
    if (out != x) std::copy_n(x, n, out);
  }
  // all_gather of rows of fp32 values (activations, their gradients): what a group may send in a
  // narrower dtype (parallel.comm_dtype), every rank then getting the same rounded rows, its own
  // included. all_gather itself moves the bits as they are (bf16 pairs too).
  virtual void gather_rows(const float* local, size_t n, float* out) { all_gather(local, n, out); }
  // The group's sum of the partial rows x (N rows of `width`; a row-parallel linear's output, a
  // column-parallel one's input gradient): whole in x on every rank, or under sequence parallelism
  // only this rank's rows, into `local` (N / size rows; may be x). A group may send the rows in a
  // narrower dtype (parallel.comm_dtype) and add them in fp32.
  virtual void sum_rows(float* x, size_t N, size_t width, float* local) {
    if (coord().split_rows())
      reduce_scatter_sum(x, N * width, local);
    else
      all_reduce_sum(x, N * width);
  }
  // sum_rows split in two so that the exchange runs beside this rank's next computation (the
  // column-parallel linears' weight gradients, which do not read x): x and local belong to the
  // group from start_sum_rows until finish_sum_rows returns, and no other collective of the group
  // may be called in between. The result is sum_rows's, bit for bit. Groups that cannot run an
  // exchange in the background (the default) do it all in start_sum_rows; overlaps() says which.
  virtual bool overlaps() const { return false; }
  virtual void start_sum_rows(float* x, size_t N, size_t width, float* local) { sum_rows(x, N, width, local); }
  virtual void finish_sum_rows() {}
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
