// SparseFormat; see sparse.h.
#include "frugal/model/formats/sparse.h"

#include <algorithm>

#include "frugal/core/profile.h"

namespace frugal {

SparseFormat::SparseFormat(int OC, int IC, std::span<const uint8_t> mask, double break_even)
    : MaskedFormat(OC, IC, mask), break_even_(break_even), packed_(kernels::sparse_linear_new_weight()) {}

std::shared_ptr<LinearFormat> SparseFormat::cut(const LinearCut& cut) const {
  auto part = std::make_shared<SparseFormat>(cut.OC, cut.IC, cut_mask(cut), break_even_);
  part->set_dense_weight_grad(dense_weight_grad_);
  return part;
}

void SparseFormat::refresh(const float* weight, int OC, int C) {
  FRUGAL_PROFILE("sparse refresh");
  check_shape(OC, C);
  const bool mask_changed = !packed_valid_ || packed_version_ != mask_version_;
  if (mask_changed) {
    const auto m = mask();
    density_ = static_cast<double>(std::ranges::count_if(m, [](uint8_t x) { return x != 0; })) /
               static_cast<double>(m.size());
  }
  if (!sparse_kernels()) {
    build_masked(weight);
  } else if (mask_changed) {
    kernels::sparse_linear_pack(*packed_, weight, mask().data(), OC, C);
  } else {
    kernels::sparse_linear_refresh_values(*packed_, weight);
  }
  // a dense refresh leaves packed_ stale: the next sparse one re-packs
  packed_valid_ = sparse_kernels();
  packed_version_ = mask_version_;
}

void SparseFormat::forward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC) {
  if (!sparse_kernels()) return MaskedFormat::forward(out, inp, weight, bias, N, C, OC);
  FRUGAL_PROFILE("sparse fwd");
  kernels::sparse_linear_forward(out, inp, *packed_, bias, N);
}

void SparseFormat::backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC,
                            bool accumulate_dinp) {
  if (dinp) {
    FRUGAL_PROFILE("sparse bwd: input grad");
    if (sparse_kernels())
      kernels::sparse_linear_backward_input(dinp, dout, *packed_, N, accumulate_dinp);
    else
      masked_input_gradient(dinp, dout, inp, N, accumulate_dinp);
  }
  if (dweight) {
    FRUGAL_PROFILE("sparse bwd: weight grad");
    if (dense_weight_grad_) {
      kernels::matmul_backward(nullptr, dweight, nullptr, dout, inp, weight, N, C, OC, false);
    } else if (sparse_kernels()) {
      kernels::sparse_linear_backward_weight(dweight, dout, inp, *packed_, N);
    } else {  // the dense product, added at the kept entries only
      dense_grad_.assign(static_cast<size_t>(OC) * C, 0.0f);
      kernels::matmul_backward(nullptr, dense_grad_.data(), nullptr, dout, inp, weight, N, C, OC,
                               false);
      const uint8_t* m = mask().data();
      const size_t n = dense_grad_.size();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; ++i)
        if (m[i]) dweight[i] += dense_grad_[i];
    }
  }
  if (dbias) kernels::matmul_backward(nullptr, nullptr, dbias, dout, inp, weight, N, C, OC, false);
}

}  // namespace frugal
