// The main of every test binary: GoogleTest's, run under the OpenMP wait policy the frugal binary
// gives itself (core/threading.h), so that tests train as users' runs do. Under libgomp's default
// spin, two test processes of ctest -j 2 each kept a 2-thread team spinning on 2 cores and slowed
// each other's steps many times over.
#include <gtest/gtest.h>

#include "frugal/core/threading.h"

int main(int argc, char** argv) {
  frugal::reexec_with_default_omp_wait_policy(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
