// Bf16Format; see bf16.h.
#include "frugal/model/formats/bf16.h"

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal {
namespace {

// x (n floats) rounded to bf16 into `buffer`.
const kernels::bf16* rounded(const float* x, size_t n, std::vector<kernels::bf16>& buffer) {
  if (buffer.size() < n) buffer.resize(n);
  kernels::f32_to_bf16(buffer.data(), x, n);
  return buffer.data();
}

// The shared scratch: the rounded input and output gradient of the linear running now.
std::vector<kernels::bf16>& input_scratch() {
  static std::vector<kernels::bf16> scratch;
  return scratch;
}
std::vector<kernels::bf16>& gradient_scratch() {
  static std::vector<kernels::bf16> scratch;
  return scratch;
}

}  // namespace

void Bf16Format::check_shape(int OC, int C) const {
  FRUGAL_CHECK(OC == OC_ && C == C_, "internal: a bf16 format refreshed for a ({}, {}) linear runs a "
               "({}, {}) one", OC_, C_, OC, C);
}

void Bf16Format::refresh(const float* weight, int OC, int C) {
  FRUGAL_PROFILE("bf16 weight rounding");
  OC_ = OC;
  C_ = C;
  weight_.resize(size_t(OC) * C);
  kernels::round_to_bf16(weight_.data(), weight, weight_.size(), weight_rounding_);
}

void Bf16Format::forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                         int OC) {
  forward_bf16_input(out, rounded(inp, size_t(N) * C, input_scratch()), weight, bias, N, C, OC);
}

void Bf16Format::forward_bf16_input(float* out, const kernels::bf16* inp, const float* /*weight*/, const float* bias,
                                    int N, int C, int OC) {
  check_shape(OC, C);
  kernels::matmul_bf16_forward(out, inp, weight_.data(), bias, N, C, OC);
}

void Bf16Format::backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC, bool accumulate_dinp) {
  backward_bf16_input(dinp, dweight, dbias, dout, dweight ? rounded(inp, size_t(N) * C, input_scratch()) : nullptr,
                      weight, N, C, OC, accumulate_dinp);
}

void Bf16Format::backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                     const kernels::bf16* inp, const float* weight, int N, int C, int OC,
                                     bool accumulate_dinp) {
  check_shape(OC, C);
  if (!dinp && !dweight) {
    if (dbias) kernels::matmul_backward(nullptr, nullptr, dbias, dout, nullptr, weight, N, C, OC, false);
    return;
  }
  const kernels::bf16* dout16 = nullptr;
  if (dbias) {  // the output gradient rounded and the bias gradient summed in one pass
    std::vector<kernels::bf16>& scratch = gradient_scratch();
    if (scratch.size() < size_t(N) * OC) scratch.resize(size_t(N) * OC);
    kernels::f32_to_bf16_bias_grad(scratch.data(), dbias, dout, N, OC);
    dout16 = scratch.data();
  } else {
    dout16 = rounded(dout, size_t(N) * OC, gradient_scratch());
  }
  kernels::matmul_bf16_backward(dinp, dweight, dout16, dweight ? inp : nullptr, weight_.data(), N, C, OC,
                                accumulate_dinp);
}

}  // namespace frugal
