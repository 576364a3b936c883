// Sparse24Format: the execution format of a 2:4-masked linear layer (METHODS.md section 4), a
// MaskedFormat whose mask is 2:4 and whose products run on the 2:4 kernels of kernels/ops.h.
// The dense master weight W stays in the parameter buffer; the format keeps mask ⊙ W packed
// (a backend-owned kernels::Sparse24Packed) and refreshes its values after every optimizer step.
//   forward         Y = X · S(W)ᵀ          2:4 kernel
//   input gradient  dX = dY · S(W)         2:4 kernel (transposable mask); with a row-only mask
//                                          Wᵀ is not 2:4, so MaskedFormat's dense GEMM on W ⊙ M
//   weight gradient dW += dYᵀ · X          dense (straight-through estimator: the gradient of the
//                                          dense master weight), or with the MVUE option
//                                          dW += MVUE(dYᵀ) · X, an unbiased 2:4 sparsification of
//                                          dYᵀ along the token dimension (kernels::mvue24_rows,
//                                          executed densely; a tensor-parallel part draws the
//                                          whole linear's random numbers for its columns)
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/model/formats/masked.h"

namespace frugal {

class Sparse24Format final : public MaskedFormat {
 public:
  // mask (OC,IC) 0/1, copied; it (and every later set_mask) must be 2:4: transposable, or
  // row-wise when transposable = false (checked when the next refresh() packs it).
  Sparse24Format(int OC, int IC, std::span<const uint8_t> mask, bool transposable, bool mvue);

  const char* name() const override { return "sparse24"; }
  bool reentrant_forward() const override { return false; }
  void refresh(const float* weight, int OC, int C) override;
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
               int OC) override;
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  double forward_density() const override { return 0.5; }
  double backward_input_density() const override { return transposable_ ? 0.5 : 1.0; }
  double weight_grad_density() const override { return 1.0; }
  // A 2:4 mask cut along rows, or along columns at multiples of 4, stays 2:4 (transposable too).
  std::shared_ptr<LinearFormat> cut(const LinearCut& cut) const override;

  // Key of the MVUE random numbers; every backward() after this call draws from mix(key, calls).
  void set_random_key(uint64_t key) {
    key_ = key;
    calls_ = 0;
  }

 private:
  bool transposable_, mvue_;
  kernels::Sparse24Packed packed_;
  // The mask_version_ packed_'s layout was built from: refresh() rebuilds the layout only after a
  // mask change, and otherwise just gathers the new values.
  uint64_t packed_version_ = 0;
  std::vector<float> dout_sparse_;  // (N, OC) MVUE scratch
  // A tensor-parallel part's output columns in the whole linear of whole_OC_ (empty: whole), so
  // the MVUE draws the whole linear's random numbers.
  std::vector<int32_t> whole_columns_;
  int whole_OC_ = 0;
  uint64_t key_ = 0, calls_ = 0;
};

}  // namespace frugal
