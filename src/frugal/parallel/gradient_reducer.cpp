// Bucketed gradient reduction on a communication thread; see gradient_reducer.h.
#include "frugal/parallel/gradient_reducer.h"

#include <fmt/format.h>

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/timer.h"
#include "frugal/parallel/wire.h"

namespace frugal::parallel {
GradientReducer::GradientReducer(MpiWorld& world, size_t bucket_floats, kernels::DType wire)
    : world_(world), comm_(world.new_communicator()), bucket_floats_(std::max<size_t>(bucket_floats, 1)),
      wire_(wire), thread_([this] { communicate(); }) {}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  changed_.notify_all();
  thread_.join();
  MPI_Comm_free(&comm_);
}

void GradientReducer::begin(float* grads, size_t begin, size_t end, Mode mode,
                            std::vector<size_t> shard_bounds) {
  FRUGAL_CHECK(mode == Mode::AllReduce || shard_bounds.size() == size_t(world_.size()) + 1,
               "internal: reduce-scatter needs one shard per rank");
  std::lock_guard lock(mutex_);
  FRUGAL_CHECK(unfinished_ == 0, "internal: a gradient reduction began before the last finished");
  grads_ = grads;
  begin_ = begin;
  end_ = launched_ = end;
  mode_ = mode;
  shards_ = std::move(shard_bounds);
  bytes_ = 0;
  buckets_ = 0;
}

void GradientReducer::ready(size_t from) {
  from = std::max(from, begin_);
  if (launched_ - from >= bucket_floats_) launch(from);
}

void GradientReducer::launch(size_t from) {
  if (from >= launched_) return;
  enqueue(from, launched_);
  launched_ = from;
}

void GradientReducer::launch_range(size_t b, size_t e) {
  FRUGAL_CHECK(e <= begin_, "internal: an extra bucket overlaps the reduced range");
  if (b < e) enqueue(b, e);
}

void GradientReducer::enqueue(size_t b, size_t e) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({b, e});
    ++unfinished_;
    bytes_ += (e - b) * (wire_ == kernels::DType::BF16 ? sizeof(kernels::bf16) : sizeof(float));
    ++buckets_;
  }
  changed_.notify_all();
}

double GradientReducer::finish() {
  launch(begin_);
  Timer waited;
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return unfinished_ == 0; });
  return waited.seconds();
}

void GradientReducer::communicate() {
  for (;;) {
    Bucket bucket;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;  // quit_
      bucket = queue_.front();
      queue_.pop_front();
    }
    reduce(bucket);
    {
      std::lock_guard lock(mutex_);
      --unfinished_;
    }
    changed_.notify_all();
  }
}

void GradientReducer::reduce(const Bucket& b) {
  const std::string what = fmt::format("the reduction of gradients [{}, {})", b.begin, b.end);
  if (mode_ == Mode::AllReduce) return all_reduce_sum(world_, comm_, grads_ + b.begin, b.end - b.begin, wire_, staged_, what);
  reduce_scatter_sum(world_, comm_, grads_, b.begin, b.end, shards_, wire_, staged_, counts_, what);
}

}  // namespace frugal::parallel
