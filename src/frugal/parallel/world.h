// The processes one invocation of frugal runs as: one, or the ranks of an MPI job when mpirun
// started it with more than one process. The command line joins the world first thing in main
// and asks it for the process group and the step strategy of `frugal train` and `frugal bench`;
// this header keeps MPI out of every file but parallel/'s own. Built without MPI (FRUGAL_MPI),
// a frugal started by mpirun with several processes says how to rebuild instead of running N
// copies of one single-process run.
#pragma once
#include <memory>

#include "frugal/train/process_group.h"
#include "frugal/train/step.h"

namespace frugal::parallel {

class MpiWorld;

class World {
 public:
  // Joins the MPI job this process belongs to (MPI_Init) when launched by mpirun, and sets the
  // default threads per rank to the machine's cores divided by the ranks on it (unless
  // OMP_NUM_THREADS is set). Call once, first in main; the world ends with the process.
  static World& join(int* argc, char*** argv);
  // The world joined by join().
  static World& current();

  ProcessGroup& group();
  // More than one process: training and benchmarks run data parallel.
  bool parallel() const;
  // The step strategy of train and bench, the one place it is chosen: under mpirun tensor
  // parallelism (parallel.tensor > 1, parallel/tensor_parallel.h), expert parallelism
  // (parallel.expert > 1, parallel/expert_parallel.h), a pipeline
  // (parallel.pipeline_stages > 1, parallel/pipeline.h) or data parallelism over the ranks
  // (parallel/data_parallel.h), else one process (train/step.h).
  StepStrategyFactory step_strategy();
  // Seconds a rank waits for the others before it stops the job naming the silent ranks.
  void set_timeout(double seconds);
  // After an error on this rank: ends every rank with `code` (the others, waiting for this one
  // in a collective, would otherwise wait until their timeout). In one process: returns code.
  int fail(int code);
  // After an error every rank raised at the same point (CollectiveError): waits until every rank
  // has reported it, then returns code; the ranks end normally, none is aborted mid-report.
  int fail_together(int code);

  ~World();

 private:
  World() = default;
  std::unique_ptr<MpiWorld> mpi_;  // null in one process
};

}  // namespace frugal::parallel
