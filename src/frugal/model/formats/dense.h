// DenseFormat: the default format of every block linear, the dense GEMMs of kernels/ops.h
// (matmul_forward, matmul_backward) on the master weight itself. Stateless: one instance can
// serve every linear of a model.
#pragma once
#include "frugal/model/linear_format.h"

namespace frugal {

class DenseFormat final : public LinearFormat {
 public:
  const char* name() const override { return "dense"; }
  bool reentrant_forward() const override { return true; }
  void refresh(const float*, int, int) override {}
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
               int OC) override;
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  double forward_density() const override { return 1.0; }
  double backward_input_density() const override { return 1.0; }
  double weight_grad_density() const override { return 1.0; }
};

}  // namespace frugal
