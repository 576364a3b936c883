// The whole-model gradient at the current parameters, shared by the model and method tests.
#pragma once
#include <cstdint>
#include <vector>

#include "frugal/model/gpt.h"

namespace frugal::testing {

// Zeroes the gradients, runs forward (grad scale 1) and backward on one batch planned with
// model.plan(), and returns a copy of the gradient buffer.
inline std::vector<float> model_gradient(GPT& model, const std::vector<int32_t>& tokens,
                                         const std::vector<int32_t>& targets) {
  model.zero_grad();
  model.forward(tokens.data(), targets.data(), 1.0f);
  model.backward();
  return {model.grads(), model.grads() + model.num_floats()};
}

}  // namespace frugal::testing
