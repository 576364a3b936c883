// LinearFormat: how one linear layer of the model executes. Every linear is dense (BLAS) unless a
// method installs a format on its weight (by parameter name) at a Reconfigure point: a 2:4
// compressed weight, a masked or CSR sparse weight. The master weight in the flat parameter buffer
// stays dense; a format keeps whatever packed copy it needs and refreshes it in `refresh()`, which
// the trainer calls after every optimizer step.
#pragma once

namespace frugal {

class LinearFormat {
 public:
  virtual ~LinearFormat() = default;
  virtual const char* name() const = 0;
  // Re-derives packed data from the dense master weight (OC, C) after it changed.
  virtual void refresh(const float* weight, int OC, int C) = 0;
  // out (N,OC) = inp (N,C) · S(W)ᵀ + bias (bias may be null); same contract as matmul_forward.
  virtual void forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                       int C, int OC) = 0;
  // Same contract as matmul_backward (dinp overwrite or accumulate; dweight, dbias accumulate;
  // null pointers skip that gradient).
  virtual void backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int C, int OC,
                        bool accumulate_dinp) = 0;
  // Fraction of the dense multiply-adds this format executes, for FLOP accounting.
  virtual double forward_density() const = 0;       // forward product
  virtual double backward_input_density() const { return forward_density(); }
  virtual double weight_grad_density() const = 0;   // backward-weight product
};

}  // namespace frugal
