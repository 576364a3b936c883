// What the kernel-family tests (tests/test_kernel_<family>.cpp) share: the kernels and their naive
// references under short names, and gradcheck.h's helpers.
#pragma once
#include "frugal/kernels/ops.h"
#include "gradcheck.h"

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
