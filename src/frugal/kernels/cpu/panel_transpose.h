// The in-cache transposes around the CPU panel kernels (the 2:4 kernels, sparse24.cpp, and the
// unstructured sparse kernels, sparse_linear.cpp): both read a dense operand as a feature-major
// panel and write their result tile back token-major. The register block transposes are the 2:4
// family's (sparse24_microkernel.h, 16x16 with AVX-512, 8x8 with AVX2).
#pragma once
#include <cstddef>

namespace frugal::kernels {

// dst (cols, rows) = (or += when accumulate) src (rows, cols)ᵀ + col_bias (rows) or null. Whole
// blocks use the AVX-512 16x16 transpose when `avx512` (call it so only after a run-time CPU
// check), else the AVX2 8x8 one; narrower strips and scalar code take the edges. Blocks are
// visited in bands of src rows when src_bands (streaming reads), else of dst rows (streaming
// writes; see sparse24_detail::transpose_blocks).
void transpose_into(float* dst, size_t dst_ld, const float* src, size_t src_ld, int rows, int cols,
                    const float* col_bias, bool src_bands, bool accumulate, bool avx512);

}  // namespace frugal::kernels
