// SparseFormat: the execution format of a linear with an unstructured mask (dynamic sparse
// training, density ~0.05-0.5), a MaskedFormat whose products run on the sparse_linear kernels of
// kernels/ops.h (docs/sparse_linear.md) over the kept entries only. The dense master weight W
// stays in the parameter buffer; the format keeps W ⊙ M packed (a backend-owned
// kernels::SparseLinearPacked), re-packed after a mask change and value-refreshed otherwise.
//   forward         Y = X · (W⊙M)ᵀ + b        sparse kernel
//   input gradient  dX = dY · (W⊙M)           sparse kernel
//   weight gradient dW += (dYᵀ · X) ⊙ M       sparse kernel: only the kept entries of dW change;
//                   dW += dYᵀ · X             with set_dense_weight_grad(true): the dense GEMM over
//                                             every entry (topology-update steps grow by gradient
//                                             magnitude)
//   bias gradient   db += Σ dY
// Above the break-even density (a constructor parameter) the sparse kernels are slower than the
// dense GEMM, so the format runs MaskedFormat's dense GEMMs on W ⊙ M instead: the same function
// (the masked weight gradient is the dense product's kept entries), reported as density 1.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/model/formats/masked.h"

namespace frugal {

class SparseFormat final : public MaskedFormat {
 public:
  // Mask density above which the dense GEMMs are faster than the sparse kernels, measured with
  // `frugal bench --kernel sparse` (docs/sparse_linear.md): at 0.5 the three sparse products
  // together are 0.86-1.20x the speed of the dense ones (median 1.06; the weight gradient alone
  // 0.79-1.0x), at 0.2 1.85-2.76x; the three together break even at about 0.5-0.55.
  static constexpr double kDefaultBreakEven = 0.5;

  // mask (OC,IC) 0/1, copied; the sparse kernels run while its density is ≤ break_even.
  SparseFormat(int OC, int IC, std::span<const uint8_t> mask,
               double break_even = kDefaultBreakEven);

  // On: the weight gradient is the dense dW += dYᵀ · X (every entry), weight_grad_density() 1.
  void set_dense_weight_grad(bool on) { dense_weight_grad_ = on; }
  // Kept entries / (OC·IC) of the mask in use (the one of the last refresh()).
  double density() const { return density_; }
  // Whether the products run on the sparse kernels (density ≤ break-even) or dense GEMMs.
  bool sparse_kernels() const { return density_ <= break_even_; }

  const char* name() const override { return "sparse"; }
  bool reentrant_forward() const override { return false; }
  void refresh(const float* weight, int OC, int C) override;
  void forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
               int OC) override;
  void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int N, int C, int OC, bool accumulate_dinp) override;
  double forward_density() const override { return sparse_kernels() ? density_ : 1.0; }
  double backward_input_density() const override { return forward_density(); }
  double weight_grad_density() const override {
    return dense_weight_grad_ ? 1.0 : forward_density();
  }
  std::shared_ptr<LinearFormat> cut(const LinearCut& cut) const override;

 private:
  double break_even_;
  double density_ = 0;
  bool dense_weight_grad_ = false;
  kernels::SparseLinearPacked packed_;
  // The mask_version_ that density_ and (when the sparse kernels run) packed_'s structure were
  // built from: refresh() rebuilds them only after a mask change and otherwise refreshes values.
  uint64_t packed_version_ = 0;
  bool packed_valid_ = false;
  std::vector<float> dense_grad_;  // (OC, IC) the dense weight gradient above the break-even
};

}  // namespace frugal
