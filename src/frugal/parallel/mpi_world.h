// The MPI processes of a run launched by mpirun: MPI's life cycle (initialised with
// MPI_THREAD_MULTIPLE, because gradient buckets are reduced by a communication thread while the
// main thread computes), the ProcessGroup the trainer uses, and waiting on a request with a
// deadline. A rank that stops answering (hung, stopped, its machine unreachable) makes every
// other rank stop within parallel.timeout seconds plus a grace period, with one line naming it:
// ranks that time out tell each other they are alive, and whoever did not answer is named.
// (A rank that dies is mpirun's to detect: it then ends the others at once.)
// Only parallel/ sees MPI; the rest of frugal sees ProcessGroup (train/process_group.h).
#pragma once
#include <mpi.h>

#include <atomic>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "frugal/train/process_group.h"

namespace frugal::parallel {

class MpiWorld final : public ProcessGroup {
 public:
  // MPI_Init_thread; MPI_Finalize at destruction.
  MpiWorld(int* argc, char*** argv);
  ~MpiWorld() override;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Ranks on this machine (for the default threads per rank).
  int local_size() const { return local_size_; }
  void barrier() override;
  void allgather(const double* in, size_t n, double* out) override;

  // A communicator of its own for a user of the world (e.g. the gradient reducer's thread), so
  // its collectives never interleave with the trainer's.
  MPI_Comm new_communicator() const;
  // The TrainContext::allgather_replicas of a strategy whose replicas are the ranks of `comm`.
  std::function<void(const void*, size_t, void*)> allgather_over(MPI_Comm comm);
  // Every rank of `comm`'s bytes (of any length), in rank order; `what` names the exchange if a
  // rank stops answering.
  std::vector<std::string> allgather_bytes(MPI_Comm comm, const std::string& mine, const std::string& what);
  // values = each of them summed over the ranks of `comm` in rank order (the same bits on every
  // rank), in one exchange.
  void sum_in_rank_order(MPI_Comm comm, std::span<double> values, const std::string& what);
  // Seconds without progress before wait() gives up (parallel.timeout).
  void set_timeout(double seconds) { timeout_ = seconds; }
  // Waits for `request`. After the timeout: finds out which ranks no longer answer, prints
  // "error: rank R: ..." naming them and `what`, and ends the job (MPI_Abort).
  void wait(MPI_Request& request, const std::string& what);
  // Ends every rank of the job with `code` (after an error on this rank that the others, waiting
  // in a collective, would never hear of).
  [[noreturn]] void abort(int code) const;

 private:
  [[noreturn]] void stop_unanswered(const std::string& what, double waited);

  int rank_ = 0, size_ = 1, local_size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;   // the trainer's collectives
  MPI_Comm alive_ = MPI_COMM_NULL;  // "I am alive" messages after a timeout
  double timeout_ = 300;
  std::atomic<bool> stopping_{false};
};

// The ProcessGroup of the ranks of a communicator of `world` (a strategy's data replicas, which
// the trainer evaluates over): its collectives waited for with the world's deadline.
class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(MpiWorld& world, MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override;
  void allgather(const double* in, size_t n, double* out) override;

 private:
  MpiWorld& world_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace frugal::parallel
