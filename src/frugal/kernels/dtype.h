// DType: the element types of tensors and of the kernel tables that compute on them, and bf16, the
// storage type of bfloat16 values. The model's tensor declarations (model/spec.h) and the kernel
// dispatch (dispatch.h) share it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace frugal::kernels {

enum class DType { F32, BF16 };
inline const char* dtype_name(DType d) { return d == DType::BF16 ? "bf16" : "f32"; }
inline size_t dtype_size(DType d) { return d == DType::BF16 ? 2 : 4; }

// A bfloat16 value: the upper 16 bits of an IEEE float (sign, 8 exponent bits, 7 mantissa bits).
// Kernels convert; nothing computes on it directly.
enum class bf16 : uint16_t {};

}  // namespace frugal::kernels
