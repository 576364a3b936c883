// Sparse24Format; see sparse24.h.
#include "frugal/model/formats/sparse24.h"

#include "frugal/core/profile.h"
#include "frugal/core/rng.h"

namespace frugal {

Sparse24Format::Sparse24Format(int OC, int IC, std::span<const uint8_t> mask, bool transposable,
                               bool mvue)
    : MaskedFormat(OC, IC, mask),
      transposable_(transposable),
      mvue_(mvue),
      packed_(kernels::sparse24_new_weight()) {}

std::shared_ptr<LinearFormat> Sparse24Format::cut(const LinearCut& cut) const {
  auto part = std::make_shared<Sparse24Format>(cut.OC, cut.IC, cut_mask(cut), transposable_, mvue_);
  part->whole_columns_ = cut.rows;
  part->whole_OC_ = cut.whole_OC;
  return part;
}

void Sparse24Format::refresh(const float* weight, int OC, int C) {
  FRUGAL_PROFILE("sparse24 refresh");
  check_shape(OC, C);
  if (packed_version_ == mask_version_) {
    kernels::sparse24_refresh_values(*packed_, weight);
  } else {
    kernels::sparse24_pack(*packed_, weight, mask().data(), OC, C, transposable_);
    packed_version_ = mask_version_;
  }
  if (!transposable_) build_masked(weight);
}

void Sparse24Format::forward(float* out, const float* inp, const float*, const float* bias, int N,
                             int, int) {
  FRUGAL_PROFILE("sparse24 fwd");
  kernels::sparse24_matmul_forward(out, inp, *packed_, bias, N);
}

void Sparse24Format::backward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* weight, int N, int C, int OC,
                              bool accumulate_dinp) {
  if (dinp) {
    FRUGAL_PROFILE("sparse24 bwd: input grad");
    if (transposable_)
      kernels::sparse24_matmul_backward_input(dinp, dout, *packed_, N, accumulate_dinp);
    else
      masked_input_gradient(dinp, dout, inp, N, accumulate_dinp);
  }
  if (!dweight && !dbias) return;
  const float* dout_w = dout;
  if (mvue_ && dweight) {
    dout_sparse_.resize(static_cast<size_t>(N) * OC);
    kernels::mvue24_rows(dout_sparse_.data(), dout, N, OC, mix64(key_ ^ mix64(calls_++)),
                         whole_columns_.empty() ? nullptr : whole_columns_.data(), whole_OC_);
    dout_w = dout_sparse_.data();
  }
  // The bias gradient is a sum over tokens, not a product: it always uses the exact dout.
  kernels::matmul_backward(nullptr, dweight, nullptr, dout_w, inp, weight, N, C, OC, false);
  kernels::matmul_backward(nullptr, nullptr, dbias, dout, inp, weight, N, C, OC, false);
}

}  // namespace frugal
