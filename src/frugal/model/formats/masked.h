// MaskedFormat: a linear whose effective weight is W ⊙ M for a general 0/1 mask M (OC,IC) that the
// format owns (unstructured sparsity at any density). It runs the dense GEMMs of kernels/ops.h on a
// masked copy of W, rebuilt in refresh():
//   forward         Y = X · (W⊙M)ᵀ + b
//   input gradient  dX = dY · (W⊙M)
//   weight gradient dW += dYᵀ · X, db += Σ dY   dense: the straight-through estimator, the
//                                               gradient of the dense master weight
// Executing dense GEMMs, it reports dense FLOPs (densities 1); a sparse kernel for such masks
// would be a format of its own. Sparse24Format derives from it: same mask ownership and the same
// function, computed with 2:4 kernels.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "frugal/model/linear_format.h"

namespace frugal {

class MaskedFormat : public LinearFormat {
 public:
  // mask (OC,IC) 0/1 (non-zero = kept), copied.
  MaskedFormat(int OC, int IC, std::span<const uint8_t> mask);

  // Replaces the mask with a copy of `mask` (OC·IC entries, else throws); the format uses it from
  // the next refresh() on. The caller's array is not referenced afterwards.
  void set_mask(std::span<const uint8_t> mask);
  std::span<const uint8_t> mask() const { return mask_; }

  const char* name() const override { return "masked"; }
  bool reentrant_forward() const override { return true; }  // a dense GEMM of W ⊙ M
  void refresh(const float* weight, int OC, int C) override;
  void write_effective_weight(float* weight, int OC, int C) const override;  // W ⊙ M
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
               int OC) override;
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  double forward_density() const override { return 1.0; }
  double backward_input_density() const override { return 1.0; }
  double weight_grad_density() const override { return 1.0; }
  std::shared_ptr<LinearFormat> cut(const LinearCut& cut) const override;

 protected:
  // The part of the mask the cut keeps, (cut.OC, cut.IC).
  std::vector<uint8_t> cut_mask(const LinearCut& cut) const;
  // Throws unless (OC, C) is the shape the format was built for.
  void check_shape(int OC, int C) const;
  // masked_ (OC,IC) = W ⊙ M from weight (OC,IC).
  void build_masked(const float* weight);
  // dinp (N,IC) = (or += when accumulate) dout (N,OC) · (W⊙M), from the last build_masked().
  void masked_input_gradient(float* dinp, const float* dout, const float* inp, int N,
                             bool accumulate) const;

  const int OC_, IC_;
  // Bumped by set_mask() when the mask's content changes: derived formats rebuild what depends on
  // the mask's structure (not just its values) when it differs from the version they built.
  uint64_t mask_version_ = 0;

 private:
  std::vector<uint8_t> mask_;   // (OC, IC)
  std::vector<float> masked_;   // (OC, IC) W ⊙ M
};

}  // namespace frugal
