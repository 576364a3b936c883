// DType: the element types of tensors and of the kernel tables that compute on them (fp32 today;
// bf16 adds a value here). The model's tensor declarations (model/spec.h) and the kernel dispatch
// (dispatch.h) share it.
#pragma once
#include <cstddef>

namespace frugal::kernels {

enum class DType { F32 };
inline const char* dtype_name(DType) { return "f32"; }
inline size_t dtype_size(DType) { return 4; }

}  // namespace frugal::kernels
