// Where the tests find the checkout and the build: the source directory, the test data, the frugal
// binary and mpiexec. Defined in tests/paths.cpp, the one test source compiled with these paths, so
// every other test object is the same in every checkout (ccache hits them in a fresh clone).
#pragma once

namespace test_paths {
const char* source_dir();  // the checkout's root
const char* test_data();   // tests/data
const char* binary();      // the frugal binary under test
const char* mpiexec();     // the MPI launcher CMake found ("" without MPI)
}  // namespace test_paths
