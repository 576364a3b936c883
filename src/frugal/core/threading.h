// Thread-count control shared by OpenMP kernels and the BLAS library.
#pragma once

namespace frugal {

// Sets the thread count for OpenMP regions and BLAS calls. n <= 0 keeps the current setting.
void set_num_threads(int n);
int num_threads();

}  // namespace frugal
