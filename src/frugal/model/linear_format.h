// LinearFormat: how one linear layer of the model executes. Every block linear has one: DenseFormat
// (model/formats/dense.h) unless a method installs another on it at a Reconfigure point (a masked
// weight, a 2:4 compressed weight; the formats live in model/formats/, their kernels are declared in
// kernels/ops.h). The master weight in the flat parameter buffer stays dense; a format keeps
// whatever derived copy it needs (a mask it owns, a packed weight) and re-derives it in
// `refresh()`, which the trainer calls after every optimizer step.
//
// A linear's input may be stored in bf16 only (train.precision = "bf16": the LayerNorm and the MLP
// activation write their outputs for the linears in bf16, model/branches.h): forward_bf16_input and
// backward_bf16_input take it, by default widened to fp32 for forward/backward; a format computing
// in bf16 (Bf16Format) reads it as it is and says so in bf16_input().
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "frugal/kernels/dtype.h"

namespace frugal {

// A tensor-parallel rank's part of a whole linear: its local (OC, IC) and how the entries of a
// whole (OC, IC) array map into it (the weight's placement: rows of a column-parallel linear,
// columns of a row-parallel one), and which of the whole linear's whole_OC output rows each of
// the part's OC rows is.
struct LinearCut {
  int OC = 0, IC = 0;
  std::function<void(const uint8_t* whole, uint8_t* part)> copy;
  int whole_OC = 0;
  std::vector<int32_t> rows;  // (OC)
};

// The rows a linear reads: fp32, bf16 or both (b16 then holds f32 rounded to nearest even).
struct LinearInput {
  const float* f32 = nullptr;
  const kernels::bf16* b16 = nullptr;
  // Rows from row0 on, of `width` values each.
  LinearInput from_row(size_t row0, size_t width) const {
    return {f32 ? f32 + row0 * width : nullptr, b16 ? b16 + row0 * width : nullptr};
  }
};

class LinearFormat {
 public:
  virtual ~LinearFormat() = default;
  virtual const char* name() const = 0;
  // Re-derives the format's data from the dense master weight (OC, C) after it changed.
  virtual void refresh(const float* weight, int OC, int C) = 0;
  // Overwrites the dense master weight (OC, C) with the weight this format computes with (W ⊙ M
  // for a masked format), so that a dense linear of it computes the same function (an export, a
  // run started from a checkpoint). Formats computing with W itself leave it.
  virtual void write_effective_weight(float* weight, int OC, int C) const {}
  // out (N,OC) = inp (N,C) · S(W)ᵀ + bias (bias may be null); same contract as matmul_forward.
  virtual void forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                       int C, int OC) = 0;
  // Whether forward may run on several threads at once (other rows, one thread each): it keeps
  // no scratch of its own. GPT then runs a frozen prefix's samples in parallel.
  virtual bool reentrant_forward() const { return false; }
  // Same contract as matmul_backward (dinp overwrite or accumulate; dweight, dbias accumulate;
  // null pointers skip that gradient).
  virtual void backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int C, int OC,
                        bool accumulate_dinp) = 0;
  // Whether the format computes on bf16 inputs: given an input in both types, it takes the bf16.
  virtual bool bf16_input() const { return false; }
  // forward and backward with the input inp (N, C) in bf16; by default widened to fp32 in scratch
  // of the calling thread.
  virtual void forward_bf16_input(float* out, const kernels::bf16* inp, const float* weight, const float* bias,
                                  int N, int C, int OC);
  virtual void backward_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const kernels::bf16* inp, const float* weight, int N, int C, int OC,
                                   bool accumulate_dinp);
  // FLOP accounting (train/flops.h): the fraction of the dense multiply-adds each product really
  // executes. A format that runs dense GEMMs answers 1 whatever its mask.
  virtual double forward_density() const = 0;         // Y = X · S(W)ᵀ
  virtual double backward_input_density() const = 0;  // dX = dY · S(W)
  virtual double weight_grad_density() const = 0;     // dW += dYᵀ · X
  // The format of this rank's part of the linear under tensor parallelism, installed on each shard
  // the model is cut into (Session keeps the whole one). Throws Error for a format that has no
  // part (the default formats are never cut: a shard builds its own).
  virtual std::shared_ptr<LinearFormat> cut(const LinearCut& cut) const;
};

}  // namespace frugal
