// Thread-count control: OpenMP's, which the kernels' libraries (the BLAS) follow.
#pragma once

#include <string>

namespace frugal {

// Sets the thread count for OpenMP regions and then tells the follower (the BLAS's thread
// count). n <= 0 keeps the current setting.
void set_num_threads(int n);
int num_threads();
// The one function set_num_threads(n) calls with n after OpenMP's: how a library below that keeps
// its own thread count follows (kernels/cpu/gemm.cpp registers OpenBLAS's when it is loaded).
void set_thread_count_follower(void (*follower)(int));

// How long an idle OpenMP thread spins before it sleeps, in libgomp's spin iterations (one PAUSE
// instruction each), when the user sets neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT. libgomp's own
// default spins 300000 iterations: on a machine whose cores other processes also use, every barrier
// then waits for a descheduled thread while its partner burns the core. 1000 was measured against
// 300000, 300, 100 and passive on a quiet and a loaded machine (docs/performance.md).
inline constexpr const char* kDefaultOmpSpinCount = "1000";

// libgomp reads its wait policy once, when it is loaded, before main runs: a default can only be
// given by re-executing the program with GOMP_SPINCOUNT set. Call first in main. Does nothing when
// the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT; if the re-exec fails, libgomp's default stays.
void reexec_with_default_omp_wait_policy(char** argv);

// The wait policy in effect, for benchmark records: e.g. "GOMP_SPINCOUNT=300".
std::string omp_wait_policy();

}  // namespace frugal
