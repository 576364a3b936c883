// LinearFormat's defaults: a bf16 input widened to fp32 for the format's fp32 forward/backward,
// and no tensor-parallel part; see linear_format.h.
#include "frugal/model/linear_format.h"

#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal {
namespace {

// inp (n values) widened into a buffer of the calling thread (formats with reentrant forwards run
// on several threads at once).
const float* widened(const kernels::bf16* inp, size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  kernels::bf16_to_f32(buffer.data(), inp, n);
  return buffer.data();
}

}  // namespace

void LinearFormat::forward_bf16_input(float* out, const kernels::bf16* inp, const float* weight, const float* bias,
                                      int N, int C, int OC) {
  forward(out, widened(inp, size_t(N) * C), weight, bias, N, C, OC);
}

void LinearFormat::backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                       const kernels::bf16* inp, const float* weight, int N, int C, int OC,
                                       bool accumulate_dinp) {
  backward(dinp, dweight, dbias, dout, dweight ? widened(inp, size_t(N) * C) : nullptr, weight, N, C, OC,
           accumulate_dinp);
}

std::shared_ptr<LinearFormat> LinearFormat::cut(const LinearCut&) const {
  fail("internal: the {} linear format has no tensor-parallel part", name());
}

}  // namespace frugal
