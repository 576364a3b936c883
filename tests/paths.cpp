// The paths of tests/paths.h, from the definitions tests/CMakeLists.txt gives this file alone.
#include "paths.h"

namespace test_paths {
const char* source_dir() { return FRUGAL_SOURCE_DIR; }
const char* test_data() { return FRUGAL_TEST_DATA; }
const char* binary() { return FRUGAL_BINARY; }
const char* mpiexec() { return FRUGAL_MPIEXEC; }
}  // namespace test_paths
