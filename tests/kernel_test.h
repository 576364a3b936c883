// What the kernel-family tests (tests/test_kernel_<family>.cpp) share: the kernels and their naive
// references under short names, gradcheck.h's helpers, and the optimised kernels under any
// FRUGAL_ISA (optimised_kernels.h), a loop over the instruction sets, the bound of a bf16 output.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "frugal/kernels/dispatch.h"
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

namespace frugal::testing {

// Runs `check` on every optimised instruction set this CPU has (and first on the reference path
// when with_reference), then restores the widest (what OptimisedKernels set).
template <class F>
void on_every_isa(F check, bool with_reference = false) {
  std::vector<kernels::Isa> isas = kernels::available_isas();
  if (with_reference) isas.insert(isas.begin(), kernels::Isa::Ref);
  for (const kernels::Isa isa : isas) {
    kernels::set_kernel_isa(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    check();
  }
  kernels::set_kernel_isa(kernels::max_isa());
}

// bf16 storage against fp32 values (the kernels that write bf16 activations): `got` is `exact`
// rounded to nearest, so each element lies within half a bf16 step of it (bf16 keeps 8 significant
// bits: 2^-8 relative), plus `abs` for the fp32 kernel's own error. Returns the first element
// outside, or -1.
inline long first_outside_bf16_rounding(const std::vector<kernels::bf16>& got, const std::vector<double>& exact,
                                        double abs) {
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t bits = uint32_t(static_cast<uint16_t>(got[i])) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    if (!(std::fabs(value - exact[i]) <= 0x1p-8 * std::fabs(exact[i]) + abs)) return long(i);
  }
  return -1;
}

}  // namespace frugal::testing
using frugal::testing::first_outside_bf16_rounding;
using frugal::testing::on_every_isa;
