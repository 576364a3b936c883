// The CPU backend: which table of every kernel family each instruction set runs (cpu_backend.h).
// The one place the CPU's implementations are registered with the dispatch (kernels/dispatch.h).
#include "frugal/kernels/cpu/cpu_backend.h"

#include "frugal/core/error.h"

namespace frugal::kernels {
namespace {

using namespace cpu;

constexpr KernelTables kRef{Device::Cpu,    Isa::Ref,         DType::F32,      &encoder_ref,
                            &layernorm_ref, &matmul_ref,      &bf16_ref,       &sparse24_ref,   &sparse_linear_ref,
                            &attention_ref, &activations_ref, &elementwise_ref, &lm_head_ref,
                            &adamw_ref,     &moe_ref,        &newton_schulz_ref, &qk_transform_ref};
constexpr KernelTables kAvx2{Device::Cpu,     Isa::Avx2,         DType::F32,        &encoder_avx2,
                             &layernorm_avx2, &matmul_avx2,      &bf16_avx2,        &sparse24_avx2,    &sparse_linear_avx2,
                             &attention_avx2, &activations_avx2, &elementwise_avx2, &lm_head_avx2,
                             &adamw_avx2,     &moe_avx2,       &newton_schulz_avx2, &qk_transform_avx2};
// AVX-512 variants of the attention tiles, the sparse micro-kernels and the bf16 conversions; AVX2
// elsewhere.
constexpr KernelTables kAvx512{Device::Cpu,       Isa::Avx512,       DType::F32,        &encoder_avx2,
                               &layernorm_avx2,   &matmul_avx2,      &bf16_avx512,      &sparse24_avx512,  &sparse_linear_avx512,
                               &attention_avx512, &activations_avx2, &elementwise_avx2, &lm_head_avx2,
                               &adamw_avx2,     &moe_avx2,       &newton_schulz_avx2, &qk_transform_avx2};

}  // namespace

const KernelTables& cpu_kernel_tables(Isa isa, DType dtype) {
  FRUGAL_CHECK(dtype == DType::F32, "the CPU kernels have no {} tables", dtype_name(dtype));
  switch (isa) {
    case Isa::Ref: return kRef;
    case Isa::Avx2: return kAvx2;
    case Isa::Avx512: return kAvx512;
    default: fail("internal: cpu_kernel_tables needs a resolved instruction set, got {}", isa_name(isa));
  }
}

}  // namespace frugal::kernels
