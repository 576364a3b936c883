// Joining the MPI job, or running alone; see world.h.
#include "frugal/parallel/world.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frugal/core/error.h"
#include "frugal/core/threading.h"

#ifdef FRUGAL_HAVE_MPI
#include "frugal/parallel/data_parallel.h"
#include "frugal/parallel/expert_parallel.h"
#include "frugal/parallel/mpi_world.h"
#include "frugal/parallel/pipeline.h"
#include "frugal/parallel/tensor_parallel.h"
#endif

namespace frugal::parallel {
namespace {

World* joined = nullptr;

// The job size mpirun announces in the environment (Open MPI, or a PMI-based launcher); 0 when
// this process was not started by an MPI launcher.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

#ifndef FRUGAL_HAVE_MPI
class MpiWorld {};  // a build without MPI never creates one
#endif
World::~World() = default;

World& World::join(int* argc, char*** argv) {
  static World world;
  joined = &world;
  const int size = launcher_size();
#ifdef FRUGAL_HAVE_MPI
  if (size >= 1) {
    world.mpi_ = std::make_unique<MpiWorld>(argc, argv);
    if (!std::getenv("OMP_NUM_THREADS"))
      set_num_threads(std::max(1, omp_get_num_procs() / world.mpi_->local_size()));
  }
#else
  if (size > 1) {
    std::fprintf(stderr, "error: started by mpirun with %d processes, but this frugal was built "
                 "without MPI; apt-get install libopenmpi-dev openmpi-bin, then rebuild "
                 "(cmake -DFRUGAL_MPI=ON)\n", size);
    std::exit(1);
  }
#endif
  return world;
}

World& World::current() { return *joined; }

ProcessGroup& World::group() {
#ifdef FRUGAL_HAVE_MPI
  if (mpi_) return *mpi_;
#endif
  return single_process();
}

bool World::parallel() const {
#ifdef FRUGAL_HAVE_MPI
  return mpi_ && mpi_->size() > 1;
#else
  return false;
#endif
}

StepStrategyFactory World::step_strategy() {
#ifdef FRUGAL_HAVE_MPI
  if (parallel())
    return [&world = *mpi_](Session& session, MethodSet& methods, const RunSettings& settings) -> std::unique_ptr<StepStrategy> {
      if (settings.parallel.tensor > 1 && settings.parallel.pipeline_stages == 1)
        return std::make_unique<TensorParallelStep>(session, methods, settings, world);
      if (settings.parallel.expert > 1)
        return std::make_unique<ExpertParallelStep>(session, methods, settings, world);
      if (settings.parallel.pipeline_stages > 1)
        return std::make_unique<PipelineStep>(session, methods, settings, world);
      return std::make_unique<DataParallelStep>(session, methods, settings, world);
    };
#endif
  return [](Session& session, MethodSet& methods, const RunSettings& settings) {
    FRUGAL_CHECK(settings.parallel.pipeline_stages == 1, "parallel.pipeline_stages = {} needs that many "
                 "processes or a multiple: run under mpirun -np {} (or set it to 1)",
                 settings.parallel.pipeline_stages, settings.parallel.pipeline_stages);
    FRUGAL_CHECK(settings.parallel.tensor == 1, "parallel.tensor = {} needs that many processes: run "
                 "under mpirun -np {} (or set it to 1)", settings.parallel.tensor, settings.parallel.tensor);
    FRUGAL_CHECK(settings.parallel.expert == 1, "parallel.expert = {} needs that many processes: run "
                 "under mpirun -np {} (or set it to 1)", settings.parallel.expert, settings.parallel.expert);
    return make_single_process_step(session, methods, settings);
  };
}

void World::set_timeout(double seconds) {
#ifdef FRUGAL_HAVE_MPI
  if (mpi_) mpi_->set_timeout(seconds);
#endif
}

int World::fail(int code) {
#ifdef FRUGAL_HAVE_MPI
  if (parallel()) mpi_->abort(code);
#endif
  return code;
}

int World::fail_together(int code) {
  std::fflush(stderr);
  group().barrier();
  return code;
}

}  // namespace frugal::parallel
