// MPI's life cycle, the world's ProcessGroup and the deadline on waits; see mpi_world.h.
#include "frugal/parallel/mpi_world.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "frugal/core/error.h"

namespace frugal::parallel {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAliveTag = 7;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Polls `done` until it returns true or `seconds` pass; spins briefly, then sleeps between polls
// so that a waiting rank leaves the cores to the ranks that compute. Returns whether it finished.
template <typename Done>
bool poll_until(Done&& done, double seconds) {
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    if (done()) return true;
    if (polls > 64) {
      if (seconds_since(start) > seconds) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace

MpiWorld::MpiWorld(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "error: this MPI library does not support MPI_THREAD_MULTIPLE, which "
                 "frugal's overlapped gradient reduction needs; use Open MPI from Debian "
                 "(libopenmpi-dev)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_dup(MPI_COMM_WORLD, &alive_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
}

MpiWorld::~MpiWorld() {
  MPI_Comm_free(&alive_);
  MPI_Comm_free(&comm_);
  MPI_Finalize();
}

MPI_Comm MpiWorld::new_communicator() const {
  MPI_Comm comm;
  MPI_Comm_dup(comm_, &comm);
  return comm;
}

std::function<void(const void*, size_t, void*)> MpiWorld::allgather_over(MPI_Comm comm) {
  return [this, comm](const void* mine, size_t bytes, void* all) {
    MPI_Request request;
    MPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm, &request);
    wait(request, "sharing a method's per-micro-batch data between the replicas");
  };
}

void MpiWorld::sum_in_rank_order(MPI_Comm comm, std::span<double> values, const std::string& what) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const size_t n = values.size();
  std::vector<double> all(n * size);
  MPI_Request request;
  MPI_Iallgather(values.data(), static_cast<int>(n), MPI_DOUBLE, all.data(), static_cast<int>(n), MPI_DOUBLE, comm,
                 &request);
  wait(request, what);
  for (size_t i = 0; i < n; ++i) {
    double total = 0;
    for (int r = 0; r < size; ++r) total += all[r * n + i];
    values[i] = total;
  }
}

std::vector<std::string> MpiWorld::allgather_bytes(MPI_Comm comm, const std::string& mine, const std::string& what) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), offsets(size, 0);
  MPI_Request request;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &request);
  wait(request, what);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
  MPI_Iallgatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE, comm, &request);
  wait(request, what);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

void MpiWorld::barrier() {
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  wait(request, "a barrier");
}

void MpiWorld::allgather(const double* in, size_t n, double* out) {
  MPI_Request request;
  MPI_Iallgather(in, static_cast<int>(n), MPI_DOUBLE, out, static_cast<int>(n), MPI_DOUBLE, comm_, &request);
  wait(request, "exchanging the step's counters");
}

MpiGroup::MpiGroup(MpiWorld& world, MPI_Comm comm) : world_(world), comm_(comm) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
}

void MpiGroup::barrier() {
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  world_.wait(request, "a barrier of the replicas");
}

void MpiGroup::allgather(const double* in, size_t n, double* out) {
  MPI_Request request;
  MPI_Iallgather(in, static_cast<int>(n), MPI_DOUBLE, out, static_cast<int>(n), MPI_DOUBLE, comm_, &request);
  world_.wait(request, "exchanging the replicas' counters");
}

void MpiWorld::wait(MPI_Request& request, const std::string& what) {
  const Clock::time_point start = Clock::now();
  const bool done = poll_until([&] {
    int flag = 0;
    MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }, timeout_);
  if (!done) stop_unanswered(what, seconds_since(start));
}

void MpiWorld::stop_unanswered(const std::string& what, double waited) {
  // Another thread of this rank timed out first and is reporting: wait for its MPI_Abort.
  if (stopping_.exchange(true)) std::this_thread::sleep_for(std::chrono::hours(1));
  // Every rank that times out tells every other one it is alive, then listens for a grace period
  // long enough for the others' timeouts (they started waiting at slightly different times).
  long alive_from = rank_;
  std::vector<MPI_Request> sends(size_);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Isend(&alive_from, 1, MPI_LONG, r, kAliveTag, alive_, &sends[r]);
  std::set<int> answered{rank_};
  const double grace = std::min(30.0, std::max(5.0, timeout_ / 4));
  long heard = 0;
  MPI_Request receive;
  MPI_Irecv(&heard, 1, MPI_LONG, MPI_ANY_SOURCE, kAliveTag, alive_, &receive);
  poll_until([&] {
    int flag = 0;
    MPI_Test(&receive, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      answered.insert(static_cast<int>(heard));
      if (static_cast<int>(answered.size()) == size_) return true;
      MPI_Irecv(&heard, 1, MPI_LONG, MPI_ANY_SOURCE, kAliveTag, alive_, &receive);
    }
    return false;
  }, grace);
  std::vector<int> silent;
  for (int r = 0; r < size_; ++r)
    if (!answered.count(r)) silent.push_back(r);
  // The lowest rank that is alive reports; the others end quietly.
  if (*answered.begin() == rank_) {
    const std::string whom = silent.empty()
        ? std::string("every rank answered, so the ranks wait on each other in different operations (a frugal bug)")
        : fmt::format("rank{} {} did not answer: it hangs, was stopped, or its machine is unreachable",
                      silent.size() > 1 ? "s" : "", fmt::join(silent, ", "));
    std::fprintf(stderr, "error: rank %d: no progress for %.0f s in %s; %s. Stopping every rank; the "
                 "last checkpoint is intact: resume from it with --resume once the cause is fixed "
                 "(parallel.timeout sets the wait)\n", rank_, waited, what.c_str(), whom.c_str());
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));  // let the reporter's line out first
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void MpiWorld::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace frugal::parallel
