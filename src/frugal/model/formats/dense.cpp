// DenseFormat; see dense.h.
#include "frugal/model/formats/dense.h"

#include "frugal/kernels/ops.h"

namespace frugal {

void DenseFormat::forward(float* out, const float* inp, const float* weight, const float* bias,
                          int N, int C, int OC) {
  kernels::matmul_forward(out, inp, weight, bias, N, C, OC);
}

void DenseFormat::backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int N, int C, int OC,
                           bool accumulate_dinp) {
  kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate_dinp);
}

}  // namespace frugal
