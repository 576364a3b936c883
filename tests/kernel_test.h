// What the kernel-family tests (tests/test_kernel_<family>.cpp) share: the kernels and their naive
// references under short names, gradcheck.h's helpers, and the optimised kernels under any
// FRUGAL_ISA (optimised_kernels.h).
#pragma once
#include "frugal/kernels/ops.h"
#include "gradcheck.h"
#include "optimised_kernels.h"

namespace frugal::kernels::ref {}  // the test includes the references of its family

namespace k = frugal::kernels;
namespace ref = frugal::kernels::ref;
using frugal::testing::dot;
using frugal::testing::max_error_rel_to_max;
using frugal::testing::max_rel_error;
using frugal::testing::numeric_gradient;
using frugal::testing::random_vector;
using frugal::testing::to_d;
using frugal::testing::to_f;

inline const auto* const optimised_kernels = frugal::testing::register_optimised_kernels();
