// Sums the gradients of a data-parallel step over the ranks in buckets, overlapped with the
// backward pass (PyTorch DDP's scheme): the model reports, layer by layer from the top, which
// part of its gradient buffer is final (GPT::set_grad_ready_hook); once a bucket's worth of final
// gradients has gathered it goes to a communication thread, which reduces it with a non-blocking
// MPI collective while the backward pass continues below. Buckets are contiguous ranges of the
// flat buffer made of whole layer groups, at least parallel.bucket_mb each (the last may be
// smaller), launched top down; frozen parameters (below the range given to begin()) never move.
// Two modes: all-reduce (every rank gets the whole sum) and reduce-scatter (each rank gets the
// sum over its own ZeRO shard only). The buckets travel as fp32 or bf16 (parallel/wire.h).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/parallel/mpi_world.h"

namespace frugal::parallel {

class GradientReducer {
 public:
  enum class Mode { AllReduce, ReduceScatter };
  // wire: the dtype of the collectives' payload (F32 or BF16).
  GradientReducer(MpiWorld& world, size_t bucket_floats, kernels::DType wire = kernels::DType::F32);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Starts reducing grads[begin, end) for one step. ReduceScatter: shard_bounds (size() + 1
  // offsets) give each rank's range; only this rank's receives the sum, and the pages of the
  // rest of each bucket are returned to the operating system once it is reduced (ZeRO-2: a rank
  // holds only its shard's gradients and the buckets not reduced yet).
  void begin(float* grads, size_t begin, size_t end, Mode mode, std::vector<size_t> shard_bounds = {});
  // The gradients of [from, end) are final (the model's grad-ready hook): launches full buckets.
  void ready(size_t from);
  // Launches [b, e), below begin's range, as a bucket of its own now (a tied head's part of the
  // token embedding's gradient, final before the backward reaches the embeddings).
  void launch_range(size_t b, size_t e);
  // Launches what is left and waits until every bucket is reduced. Returns the seconds the
  // caller waited: the communication the backward pass did not hide.
  double finish();
  // Bytes this rank handed to the collectives in the last step (in the wire dtype), and buckets.
  size_t bytes_reduced() const { return bytes_; }
  int buckets() const { return buckets_; }

 private:
  struct Bucket {
    size_t begin, end;
  };
  void launch(size_t from);
  void enqueue(size_t b, size_t e);
  void communicate();  // the communication thread
  void reduce(const Bucket& bucket);

  MpiWorld& world_;
  MPI_Comm comm_;
  size_t bucket_floats_;
  kernels::DType wire_;
  std::vector<kernels::bf16> staged_;  // the bucket on a bf16 wire (parallel/wire.h)
  // The step being reduced (set by begin(), read by the thread).
  float* grads_ = nullptr;
  size_t begin_ = 0, end_ = 0, launched_ = 0;  // buckets cover [launched_, end_)
  Mode mode_ = Mode::AllReduce;
  std::vector<size_t> shards_;
  std::vector<int> counts_;    // reduce-scatter: this bucket's floats per rank
  size_t bytes_ = 0;
  int buckets_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Bucket> queue_;
  int unfinished_ = 0;  // launched buckets not reduced yet
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace frugal::parallel
