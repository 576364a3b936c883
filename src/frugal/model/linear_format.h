// LinearFormat: how one linear layer of the model executes. Every block linear has one: DenseFormat
// (model/formats/dense.h) unless a method installs another on it at a Reconfigure point (a masked
// weight, a 2:4 compressed weight; the formats live in model/formats/, their kernels are declared in
// kernels/ops.h). The master weight in the flat parameter buffer stays dense; a format keeps
// whatever derived copy it needs (a mask it owns, a packed weight) and re-derives it in
// `refresh()`, which the trainer calls after every optimizer step.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

namespace frugal {

// A tensor-parallel rank's part of a whole linear: its local (OC, IC) and how the entries of a
// whole (OC, IC) array map into it (the weight's placement: rows of a column-parallel linear,
// columns of a row-parallel one).
struct LinearCut {
  int OC = 0, IC = 0;
  std::function<void(const uint8_t* whole, uint8_t* part)> copy;
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
