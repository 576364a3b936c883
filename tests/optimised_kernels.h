// For the tests that compare an optimised kernel with its naive reference (test_kernel_*, the
// kernel tests of test_decoder): under FRUGAL_ISA=ref the process's kernels are the references
// themselves, and a comparison of the reference with itself cannot fail, so these tests first
// point every family at the widest optimised instruction set (max_isa()). On the other paths it
// changes nothing. A test
// that restores a family after trying each instruction set restores max_isa(), not Auto.
#pragma once
#include <gtest/gtest.h>

#include "frugal/kernels/dispatch.h"

namespace frugal::testing {

class OptimisedKernels : public ::testing::Environment {
 public:
  void SetUp() override {
    if (kernels::selected_isa() == kernels::Isa::Ref) kernels::set_kernel_isa(kernels::max_isa());
  }
};

// Every family on max_isa() while in scope, the process's choice after: for a file whose other
// tests run the model on the process's path.
class ScopedOptimisedKernels {
 public:
  ScopedOptimisedKernels() { kernels::set_kernel_isa(kernels::max_isa()); }
  ~ScopedOptimisedKernels() { kernels::set_kernel_isa(kernels::Isa::Auto); }
  ScopedOptimisedKernels(const ScopedOptimisedKernels&) = delete;
  ScopedOptimisedKernels& operator=(const ScopedOptimisedKernels&) = delete;
};

// Registers OptimisedKernels for every test of the calling binary: once, at namespace scope,
// `const auto* const optimised = frugal::testing::register_optimised_kernels();`.
inline ::testing::Environment* register_optimised_kernels() {
  return ::testing::AddGlobalTestEnvironment(new OptimisedKernels);
}

}  // namespace frugal::testing
