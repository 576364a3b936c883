// The processes one training run spans, as the trainer and the checkpoint code see them: which
// rank this is, how many there are, and the few small agreements the loop needs (stop together,
// sum a step's counters, write a checkpoint together). The base class is the single process;
// parallel/ implements it over MPI. Gradients never pass through here: moving them is the step
// strategy's business (parallel/data_parallel.h).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace frugal {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // Rank 0 logs, prints, writes the run directory and the replicated parts of checkpoints.
  bool is_writer() const { return rank() == 0; }
  virtual void barrier() {}
  // out (size() * n) = every rank's in (n), in rank order.
  virtual void allgather(const double* in, size_t n, double* out) { std::copy(in, in + n, out); }

  // Whether `value` is true on any rank.
  bool any(bool value) {
    const double in = value ? 1.0 : 0.0;
    std::vector<double> all(size());
    allgather(&in, 1, all.data());
    return std::any_of(all.begin(), all.end(), [](double v) { return v != 0.0; });
  }
  // Every rank's `values`, added element-wise in rank order (the same bits on every rank).
  std::vector<double> sum(const std::vector<double>& values) {
    std::vector<double> all(values.size() * size()), out(values.size(), 0.0);
    allgather(values.data(), values.size(), all.data());
    for (int r = 0; r < size(); ++r)
      for (size_t i = 0; i < values.size(); ++i) out[i] += all[r * values.size() + i];
    return out;
  }
};

// The group of a run in one process.
inline ProcessGroup& single_process() {
  static ProcessGroup group;
  return group;
}

}  // namespace frugal
