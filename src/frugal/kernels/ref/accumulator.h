// The type the naive references sum in: double for float tensors, so that the reference path
// (FRUGAL_ISA=ref) is at least as accurate as the optimised kernels it checks and the model-level
// tolerances hold on it too; T itself otherwise (the fp64 gradient checks).
#pragma once
#include <type_traits>

namespace frugal::kernels::ref {

template <class T>
using Accum = std::conditional_t<std::is_same_v<T, float>, double, T>;

}  // namespace frugal::kernels::ref
