// The panel transposes (panel_transpose.h) on the 2:4 family's block transposes.
#include "frugal/kernels/cpu/panel_transpose.h"

#include <span>

#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels {
namespace {

using sparse24_detail::IsaKernel;
using sparse24_detail::TransposeArgs;

// The transpose of args (sparse24_detail::TransposeArgs) by the block transposes of `isas`, widest
// first: each takes the whole blocks of what is left, the next ones the right and bottom strips,
// scalar code the last edges. With AVX-512 the 16x16 blocks (64 shuffles per 256 values against
// 96 for 8x8 blocks) made the products 3-10% faster at C = 384 and changed nothing at C = 768,
// where the transposes wait on memory (docs/sparse24.md).
void transpose_region(const TransposeArgs& a, std::span<const IsaKernel* const> isas) {
  if (a.rows <= 0 || a.cols <= 0) return;
  if (isas.empty()) {
    for (int j = 0; j < a.cols; ++j)
      for (int i = 0; i < a.rows; ++i) {
        const float x = a.src[i * a.src_ld + j] + (a.col_bias ? a.col_bias[i] : 0.0f);
        float& d = a.dst[j * a.dst_ld + i];
        d = a.accumulate ? d + x : x;
      }
    return;
  }
  const int B = isas[0]->transpose_block;
  const int rows_b = a.rows / B * B, cols_b = a.cols / B * B;
  if (rows_b > 0 && cols_b > 0) {
    TransposeArgs whole = a;
    whole.rows = rows_b;
    whole.cols = cols_b;
    isas[0]->transpose(whole);
  }
  TransposeArgs right = a;  // src columns [cols_b, cols), all rows
  right.dst += cols_b * a.dst_ld;
  right.src += cols_b;
  right.cols = a.cols - cols_b;
  TransposeArgs bottom = a;  // src rows [rows_b, rows), columns [0, cols_b)
  bottom.dst += rows_b;
  bottom.src += rows_b * a.src_ld;
  bottom.rows = a.rows - rows_b;
  bottom.cols = cols_b;
  if (a.col_bias) bottom.col_bias += rows_b;
  transpose_region(right, isas.subspan(1));
  transpose_region(bottom, isas.subspan(1));
}

}  // namespace

void transpose_into(float* dst, size_t dst_ld, const float* src, size_t src_ld, int rows, int cols,
                    const float* col_bias, bool src_bands, bool accumulate, bool avx512) {
  const IsaKernel* avx2 = &sparse24_detail::avx2_kernel();
  const IsaKernel* chain[] = {avx512 ? &sparse24_detail::avx512_kernel() : avx2, avx2};
  transpose_region({dst, dst_ld, src, src_ld, rows, cols, col_bias, src_bands, accumulate},
                   std::span<const IsaKernel* const>(chain, avx512 ? 2 : 1));
}

}  // namespace frugal::kernels
