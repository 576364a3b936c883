// MaskedFormat; see masked.h.
#include "frugal/model/formats/masked.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal {

MaskedFormat::MaskedFormat(int OC, int IC, std::span<const uint8_t> mask) : OC_(OC), IC_(IC) {
  set_mask(mask);
}

void MaskedFormat::set_mask(std::span<const uint8_t> mask) {
  FRUGAL_CHECK(mask.size() == static_cast<size_t>(OC_) * IC_,
               "internal: a mask of {} entries for a ({}, {}) linear", mask.size(), OC_, IC_);
  if (std::ranges::equal(mask, mask_)) return;
  mask_.assign(mask.begin(), mask.end());
  ++mask_version_;
}

std::vector<uint8_t> MaskedFormat::cut_mask(const LinearCut& cut) const {
  std::vector<uint8_t> part(static_cast<size_t>(cut.OC) * cut.IC);
  cut.copy(mask_.data(), part.data());
  return part;
}

std::shared_ptr<LinearFormat> MaskedFormat::cut(const LinearCut& cut) const {
  return std::make_shared<MaskedFormat>(cut.OC, cut.IC, cut_mask(cut));
}

void MaskedFormat::check_shape(int OC, int C) const {
  FRUGAL_CHECK(OC == OC_ && C == IC_, "internal: the {} format of a ({}, {}) linear installed on a "
               "({}, {}) one", name(), OC_, IC_, OC, C);
}

void MaskedFormat::build_masked(const float* weight) {
  const size_t n = mask_.size();
  masked_.resize(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) masked_[i] = mask_[i] ? weight[i] : 0.0f;
}

void MaskedFormat::masked_input_gradient(float* dinp, const float* dout, const float* inp, int N,
                                         bool accumulate) const {
  kernels::matmul_backward(dinp, nullptr, nullptr, dout, inp, masked_.data(), N, IC_, OC_,
                           accumulate);
}

void MaskedFormat::refresh(const float* weight, int OC, int C) {
  FRUGAL_PROFILE("masked refresh");
  check_shape(OC, C);
  build_masked(weight);
}

void MaskedFormat::write_effective_weight(float* weight, int OC, int C) const {
  check_shape(OC, C);
  for (size_t i = 0; i < mask_.size(); ++i)
    if (!mask_[i]) weight[i] = 0.0f;
}

void MaskedFormat::forward(float* out, const float* inp, const float*, const float* bias, int N,
                           int C, int OC) {
  kernels::matmul_forward(out, inp, masked_.data(), bias, N, C, OC);
}

void MaskedFormat::backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC,
                            bool accumulate_dinp) {
  if (dinp) masked_input_gradient(dinp, dout, inp, N, accumulate_dinp);
  if (dweight || dbias)
    kernels::matmul_backward(nullptr, dweight, dbias, dout, inp, weight, N, C, OC, false);
}

}  // namespace frugal
