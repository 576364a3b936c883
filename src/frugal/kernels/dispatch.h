// The kernel dispatch: which implementation each public function of kernels/ops.h runs.
//
// A backend (Device: the CPU today) provides, for each instruction set (Isa: ref, avx2, avx512)
// and element type (DType: fp32 today), one KernelTables: a table of function pointers per kernel
// family. Each family's tables are defined beside its code and named, per instruction set, in one
// place per backend (kernels/cpu/cpu_backend.cpp, cpu_backend.h). Each family resolves its
// table once, at its first call, from the process's choice (selected_isa(): FRUGAL_ISA), and the
// functions of kernels/ops.h, defined in kernels/dispatch.cpp, are the only entry: they call
// through their family's table. Tests and benchmarks may re-point one family (attention_set_isa,
// sparse24_set_isa, sparse_linear_set_isa) or all of them (set_kernel_isa).
//
// The element type is part of the key: the tables below hold fp32 kernels (DType::F32), their
// pointer types taken from ops.h's float signatures. bf16 adds DType::BF16, bf16 overloads of the
// ops.h functions, a table struct per family spelling those signatures, and a KernelTables member
// for them; the fp32 callers do not change. docs/architecture.md (Kernels) has a worked example of
// adding a backend.
#pragma once
#include <string>

#include "frugal/kernels/cpu/isa.h"
#include "frugal/kernels/dtype.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {

enum class Device { Cpu };
const char* device_name(Device device);  // "cpu"

// ---- one table per kernel family (the sections of ops.h) ----
struct EncoderKernels {
  decltype(&kernels::encoder_forward) forward;
  decltype(&kernels::encoder_backward) backward;
};
struct LayernormKernels {
  decltype(&kernels::layernorm_forward) forward;
  decltype(&kernels::layernorm_backward) backward;
  decltype(&kernels::layernorm_forward_bf16) forward_bf16;
};
struct MatmulKernels {
  decltype(&kernels::matmul_forward) forward;
  decltype(&kernels::matmul_backward) backward;
};
struct Bf16Kernels {
  decltype(&kernels::f32_to_bf16) to_bf16;
  decltype(&kernels::round_to_bf16) round_to_bf16;
  decltype(&kernels::bf16_to_f32) to_f32;
  decltype(&kernels::f32_to_bf16_bias_grad) to_bf16_bias_grad;
  decltype(&kernels::matmul_bf16_forward) matmul_forward;
  decltype(&kernels::matmul_bf16_backward) matmul_backward;
  // The instruction set of the library kernel the GEMMs run on ("avx512_core_bf16"), or "" when
  // they widen the operands to fp32.
  std::string (*matmul_isa)();
};
struct Sparse24Kernels {
  decltype(&kernels::sparse24_pack) pack;
  decltype(&kernels::sparse24_refresh_values) refresh_values;
  decltype(&kernels::sparse24_matmul_forward) forward;
  decltype(&kernels::sparse24_matmul_backward_input) backward_input;
  decltype(&kernels::mvue24_rows) mvue_rows;
};
struct SparseLinearKernels {
  decltype(&kernels::sparse_linear_pack) pack;
  decltype(&kernels::sparse_linear_refresh_values) refresh_values;
  decltype(&kernels::sparse_linear_forward) forward;
  decltype(&kernels::sparse_linear_backward_input) backward_input;
  decltype(&kernels::sparse_linear_backward_weight) backward_weight;
};
struct AttentionKernels {
  decltype(&kernels::attention_forward) forward;
  decltype(&kernels::attention_forward_bf16) forward_bf16;
  decltype(&kernels::attention_backward) backward;
  decltype(&kernels::attention_backward_bf16) backward_bf16;
  decltype(&kernels::attention_decode) decode;
};
struct ActivationsKernels {
  decltype(&kernels::gelu_forward) gelu_forward;
  decltype(&kernels::gelu_backward) gelu_backward;
  decltype(&kernels::gated_forward) gated_forward;
  decltype(&kernels::gated_backward) gated_backward;
  decltype(&kernels::relu2_forward) relu2_forward;
  decltype(&kernels::relu2_backward) relu2_backward;
  decltype(&kernels::gelu_forward_bf16) gelu_forward_bf16;
  decltype(&kernels::relu2_forward_bf16) relu2_forward_bf16;
  decltype(&kernels::gated_forward_bf16) gated_forward_bf16;
};
struct ElementwiseKernels {
  decltype(&kernels::residual_forward) residual_forward;
  decltype(&kernels::dropout_apply) dropout_apply;
  decltype(&kernels::sum_squares_feed) sum_squares_feed;
  decltype(&kernels::sum_squares_finish) sum_squares_finish;
  decltype(&kernels::scale_inplace) scale_inplace;
};
struct LmHeadKernels {
  decltype(&kernels::lm_head_cross_entropy) cross_entropy;
  decltype(&kernels::lm_head_cross_entropy_split) cross_entropy_split;
  decltype(&kernels::lm_head_logits) logits;
  decltype(&kernels::lm_head_cross_entropy_bf16) cross_entropy_bf16;
  decltype(&kernels::lm_head_cross_entropy_split_bf16) cross_entropy_split_bf16;
  decltype(&kernels::lm_head_softcap) softcap;
};
struct MoeKernels {
  decltype(&kernels::moe_router_forward) router_forward;
  decltype(&kernels::moe_router_backward) router_backward;
  decltype(&kernels::moe_permute) permute;
  decltype(&kernels::moe_unpermute) unpermute;
  decltype(&kernels::moe_unpermute_backward) unpermute_backward;
  decltype(&kernels::moe_grouped_forward) grouped_forward;
  decltype(&kernels::moe_grouped_backward) grouped_backward;
  decltype(&kernels::moe_grouped_forward_bf16) grouped_forward_bf16;
  decltype(&kernels::moe_grouped_backward_bf16) grouped_backward_bf16;
};
struct AdamwKernels {
  decltype(&kernels::adamw_update) update;
  decltype(&kernels::adamw_update_bf16) update_bf16;
};
struct NewtonSchulzKernels {
  decltype(&kernels::newton_schulz) orthogonalise;
  decltype(&kernels::newton_schulz_bf16) orthogonalise_bf16;
};
struct QkTransformKernels {
  decltype(&kernels::qk_transform_forward) forward;
  decltype(&kernels::qk_transform_backward) backward;
};

// Every family's table for one (device, instruction set, element type). The members point to
// tables with static storage, so a KernelTables is constant-initialised.
struct KernelTables {
  Device device;
  Isa isa;
  DType dtype;
  const EncoderKernels* encoder;
  const LayernormKernels* layernorm;
  const MatmulKernels* matmul;
  const Bf16Kernels* bf16;
  const Sparse24Kernels* sparse24;
  const SparseLinearKernels* sparse_linear;
  const AttentionKernels* attention;
  const ActivationsKernels* activations;
  const ElementwiseKernels* elementwise;
  const LmHeadKernels* lm_head;
  const AdamwKernels* adamw;
  const MoeKernels* moe;
  const NewtonSchulzKernels* newton_schulz;
  const QkTransformKernels* qk_transform;
};

// The CPU backend's tables for `isa` (Ref, Avx2 or Avx512; kernels/cpu/cpu_backend.cpp).
const KernelTables& cpu_kernel_tables(Isa isa, DType dtype);

// Every family to `isa` (Auto: selected_isa()) for all later calls; throws Error when the
// instruction set is not available (isa_available). Returns the instruction set now in use.
Isa set_kernel_isa(Isa isa);
// The device and instruction set the dense families (matmul, layernorm, ...) run on now: what
// benchmarks and logs report.
const KernelTables& active_kernel_tables();
// "cpu/avx512/f32": the backend, instruction set and element type of active_kernel_tables().
std::string kernel_backend_name();

// One family re-pointed to `isa` (Auto: selected_isa()) for all later calls, as set_kernel_isa,
// for the tests and benchmarks that compare a family's paths; and the family's current path.
Isa attention_set_isa(Isa isa);
Isa attention_active_isa();
Isa sparse24_set_isa(Isa isa);
Isa sparse24_active_isa();
Isa sparse_linear_set_isa(Isa isa);
Isa sparse_linear_active_isa();
Isa moe_set_isa(Isa isa);
Isa moe_active_isa();

}  // namespace frugal::kernels
