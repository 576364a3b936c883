// The bf16 family's AVX-512 table: the conversion loops (bf16_convert.h) compiled for AVX-512, the
// GEMMs of bf16.cpp. Every header with code of external linkage (the standard library's, inline
// functions of the project's) is included before the target pragma, so that none of it is compiled
// for AVX-512 here: the linker keeps one copy of such code for the whole program, and an AVX-512
// copy would crash on an AVX2-only CPU. After the pragma come only bf16_convert.h's loops (an
// unnamed namespace) and the column sums they instantiate with their own lambda (internal too).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "frugal/core/profile.h"
#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/dtype.h"

#pragma GCC target("avx512f,avx512bw,avx512vl")
#include "frugal/kernels/cpu/bf16_convert.h"
#include "frugal/kernels/cpu/column_sums.h"

namespace frugal::kernels::cpu {

const Bf16Kernels bf16_avx512{&f32_to_bf16_loop,           &round_to_bf16_loop,  &bf16_to_f32_loop,
                              &f32_to_bf16_bias_grad_loop, &matmul_bf16_forward, &matmul_bf16_backward,
                              &onednn_bf16_matmul_isa};

}  // namespace frugal::kernels::cpu
