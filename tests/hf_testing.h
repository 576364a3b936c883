// Helpers of the Hugging Face export/import tests (test_hf_gpt2, test_hf_bert): models whose every
// tensor is distinct, and bit-exact comparison of two models' parameters.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "frugal/model/gpt.h"

namespace frugal::testing {

// A model of `c` initialised from `seed` with non-trivial biases and norms, so that a swapped or
// dropped tensor shows.
inline std::unique_ptr<GPT> perturbed_model(const ModelConfig& c, uint64_t seed = 7) {
  auto m = std::make_unique<GPT>(c);
  m->init_weights(seed);
  for (const ParamInfo& p : m->table().entries()) {
    if (p.role == ParamRole::Weight || p.role == ParamRole::Embedding) continue;
    float* v = m->params() + p.offset;
    const size_t used = p.used_rows >= 0 ? size_t(p.used_rows) * (p.numel / p.shape[0]) : p.numel;
    for (size_t i = 0; i < used; ++i) v[i] += 0.001f * static_cast<float>((i * 37 + p.offset) % 101);
  }
  return m;
}

// Every parameter tensor (padding rows included) has the same bits in both models.
inline void expect_same_params(const GPT& a, const GPT& b) {
  ASSERT_EQ(a.table().entries().size(), b.table().entries().size());
  for (const ParamInfo& p : a.table().entries()) {
    const ParamInfo& q = b.table().at(p.name);
    ASSERT_EQ(p.shape, q.shape) << p.name;
    EXPECT_EQ(std::memcmp(a.params() + p.offset, b.params() + q.offset, p.numel * sizeof(float)), 0)
        << p.name << " differs";
  }
}

}  // namespace frugal::testing
