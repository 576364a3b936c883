// Bf16Format: a dense linear computed in bfloat16 (train.precision = "bf16"). The GEMMs take bf16
// copies of the weight (rounded from the fp32 master weight in refresh(): to nearest even, or
// stochastically with train.bf16_rounding = "stochastic", kernels/bf16_rounding.h), of the
// input and of the output gradient, and sum in fp32 into fp32 results (kernels/ops.h, section
// bf16); the bias, its gradient and the weight gradient stay fp32, so AdamW updates the fp32
// master. An input stored in bf16 (forward_bf16_input, backward_bf16_input) goes to the GEMMs as it
// is; an fp32 input, and the output gradient, are rounded per call into scratch that all
// Bf16Formats of the process share (they never run at once).
#pragma once
#include <vector>

#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/dtype.h"
#include "frugal/model/linear_format.h"

namespace frugal {

class Bf16Format final : public LinearFormat {
 public:
  // `weight_rounding`: how refresh() rounds the weight (GPT::set_linear_dtype).
  explicit Bf16Format(const kernels::Bf16Rounding& weight_rounding = {}) : weight_rounding_(weight_rounding) {}
  const char* name() const override { return "bf16"; }
  void refresh(const float* weight, int OC, int C) override;
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
               int OC) override;
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  bool bf16_input() const override { return true; }
  void forward_bf16_input(float* out, const kernels::bf16* inp, const float* weight, const float* bias, int N,
                          int C, int OC) override;
  void backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout, const kernels::bf16* inp,
                           const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  // The bf16 weight (OC, C) of the last refresh(), which an optimizer may update in place
  // (GPT::update_params).
  kernels::bf16* working_copy() { return weight_.data(); }
  const kernels::Bf16Rounding& weight_rounding() const { return weight_rounding_; }
  double forward_density() const override { return 1.0; }
  double backward_input_density() const override { return 1.0; }
  double weight_grad_density() const override { return 1.0; }

 private:
  void check_shape(int OC, int C) const;
  kernels::Bf16Rounding weight_rounding_;
  std::vector<kernels::bf16> weight_;  // (OC, C), from the last refresh()
  int OC_ = 0, C_ = 0;
};

}  // namespace frugal
