// The kernel dispatch (kernels/dispatch.h): every family runs the instruction set FRUGAL_ISA names
// (run under each path by tools/test.sh), each path's tables are the implementations they claim
// (the reference path is kernels/ref/ in float, the optimised paths are not), set_kernel_isa
// re-points every family, and an unknown or unavailable instruction set is refused in one line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/ref/attention_ref.h"
#include "frugal/kernels/ref/layernorm_ref.h"
#include "frugal/kernels/ref/matmul_ref.h"
#include "frugal/kernels/ref/newton_schulz_ref.h"
#include "frugal/kernels/ref/qk_transform_ref.h"
#include "gradcheck.h"
#include "paths.h"
#include "run_cli.h"

namespace {

using namespace frugal::kernels;

// What FRUGAL_ISA asks for, auto resolved to the CPU's widest.
std::string requested_isa() {
  const char* env = std::getenv("FRUGAL_ISA");
  const std::string value = env && *env ? env : "auto";
  if (value != "auto") return value;
  return __builtin_cpu_supports("avx512f") ? "avx512" : "avx2";
}

// The error message of f(), which must throw frugal::Error.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const frugal::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no frugal::Error thrown";
  return "";
}

TEST(KernelDispatch, EveryFamilyRunsWhatFrugalIsaSays) {
  const std::string want = requested_isa();
  EXPECT_EQ(isa_name(selected_isa()), want);
  EXPECT_EQ(kernel_backend_name(), "cpu/" + want + "/f32");
  EXPECT_EQ(attention_active_isa(), selected_isa());
  EXPECT_EQ(sparse24_active_isa(), selected_isa());
  EXPECT_EQ(sparse_linear_active_isa(), selected_isa());
  EXPECT_EQ(max_isa(), want == "avx2" || !__builtin_cpu_supports("avx512f") ? Isa::Avx2 : Isa::Avx512);
}

TEST(KernelDispatch, EachPathHasItsOwnTables) {
  const KernelTables& ref = cpu_kernel_tables(Isa::Ref, DType::F32);
  EXPECT_EQ(ref.matmul->forward, &ref::matmul_forward<float>);
  EXPECT_EQ(ref.layernorm->backward, &ref::layernorm_backward<float>);
  EXPECT_EQ(ref.attention->decode, &ref::attention_decode<float>);
  EXPECT_EQ(ref.newton_schulz->orthogonalise, &ref::newton_schulz<float>);
  EXPECT_EQ(ref.qk_transform->backward, &ref::qk_transform_backward<float>);
  for (Isa isa : available_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const KernelTables& optimised = cpu_kernel_tables(isa, DType::F32);
    EXPECT_EQ(optimised.isa, isa);
    // Every family's optimised table differs from the reference's, so a kernel test comparing the
    // two compares two implementations. (mvue24_rows is its own reference on every path.)
    EXPECT_NE(optimised.encoder->forward, ref.encoder->forward);
    EXPECT_NE(optimised.layernorm->forward, ref.layernorm->forward);
    EXPECT_NE(optimised.matmul->forward, ref.matmul->forward);
    EXPECT_NE(optimised.sparse24->forward, ref.sparse24->forward);
    EXPECT_NE(optimised.sparse_linear->forward, ref.sparse_linear->forward);
    EXPECT_NE(optimised.attention->forward, ref.attention->forward);
    EXPECT_NE(optimised.activations->gated_forward, ref.activations->gated_forward);
    EXPECT_NE(optimised.elementwise->sum_squares_feed, ref.elementwise->sum_squares_feed);
    EXPECT_NE(optimised.lm_head->cross_entropy, ref.lm_head->cross_entropy);
    EXPECT_NE(optimised.adamw->update, ref.adamw->update);
    EXPECT_NE(optimised.newton_schulz->orthogonalise, ref.newton_schulz->orthogonalise);
    EXPECT_NE(optimised.qk_transform->forward, ref.qk_transform->forward);
    EXPECT_NE(optimised.lm_head->softcap, ref.lm_head->softcap);
  }
  if (isa_available(Isa::Avx512)) {
    const KernelTables& avx2 = cpu_kernel_tables(Isa::Avx2, DType::F32);
    const KernelTables& avx512 = cpu_kernel_tables(Isa::Avx512, DType::F32);
    EXPECT_NE(avx512.attention->forward, avx2.attention->forward);
    EXPECT_NE(avx512.sparse24->forward, avx2.sparse24->forward);
    EXPECT_NE(avx512.sparse_linear->forward, avx2.sparse_linear->forward);
  }
}

TEST(KernelDispatch, SetKernelIsaRepointsEveryFamily) {
  std::vector<Isa> paths = available_isas();
  paths.insert(paths.begin(), Isa::Ref);
  const std::vector<float> x = frugal::testing::random_normal_floats(4 * 16, 1);
  const std::vector<float> w = frugal::testing::random_normal_floats(8 * 16, 2);
  for (Isa isa : paths) {
    SCOPED_TRACE(isa_name(isa));
    EXPECT_EQ(set_kernel_isa(isa), isa);
    EXPECT_EQ(kernel_backend_name(), std::string("cpu/") + isa_name(isa) + "/f32");
    EXPECT_EQ(attention_active_isa(), isa);
    EXPECT_EQ(sparse24_active_isa(), isa);
    EXPECT_EQ(sparse_linear_active_isa(), isa);
    // The public entry runs the chosen path's kernel, to the bit.
    std::vector<float> got(4 * 8), want(4 * 8);
    matmul_forward(got.data(), x.data(), w.data(), nullptr, 4, 16, 8);
    cpu_kernel_tables(isa, DType::F32).matmul->forward(want.data(), x.data(), w.data(), nullptr, 4, 16, 8);
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(set_kernel_isa(Isa::Auto), selected_isa());
}

TEST(KernelDispatch, RefusesUnknownAndUnavailableInstructionSets) {
  EXPECT_EQ(parse_isa("ref"), Isa::Ref);
  EXPECT_EQ(error_of([] { parse_isa("avx1024"); }),
            "instruction set \"avx1024\" is not one of auto, ref, avx2, avx512 (FRUGAL_ISA, --isa)");
  if (!isa_available(Isa::Avx512)) {
    const std::string message = error_of([] { set_kernel_isa(Isa::Avx512); });
    EXPECT_NE(message.find("use auto, ref or avx2"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // The whole program: one line naming the variable, exit code 1, before any work.
  const auto r = frugal::testing::run_shell(
      std::string("FRUGAL_ISA=avx1024 ") + test_paths::binary() + " bench --preset S --steps 1 --warmup 0");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_EQ(r.output, "error: instruction set \"avx1024\" is not one of auto, ref, avx2, avx512 "
                      "(FRUGAL_ISA, --isa)\n");
  if (!__builtin_cpu_supports("avx512f")) {
    const auto r512 = frugal::testing::run_shell(
        std::string("FRUGAL_ISA=avx512 ") + test_paths::binary() + " bench --preset S --steps 1 --warmup 0");
    EXPECT_EQ(r512.rc, 1) << r512.output;
    EXPECT_EQ(r512.output, "error: FRUGAL_ISA=avx512 but this CPU has no AVX-512F; unset it or "
                           "use FRUGAL_ISA=avx2\n");
  }
}

}  // namespace
