// AVX2/FMA instantiation of the fused attention: 8-lane vectors, 6 x 16 micro-kernel (4 x 16 on
// bf16 pairs, widened to fp32).
#include "frugal/kernels/cpu/attention.h"
#include "frugal/kernels/cpu/attention_tiles.h"

namespace frugal::kernels::attention_detail {

const IsaKernels& avx2_kernels() {
  static const IsaKernels k{&forward<Avx2>, &forward_bf16<Avx2>, &backward<Avx2>, &backward_bf16<Avx2>};
  return k;
}

}  // namespace frugal::kernels::attention_detail
