// Linear formats (model/formats/): DenseFormat is exactly the dense matmul kernels.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/kernels/ops.h"
#include "frugal/model/formats/dense.h"
#include "gradcheck.h"

using namespace frugal;
using frugal::testing::random_vector;

namespace {

constexpr int N = 13, IC = 24, OC = 20;

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// What one format computes for fixed inputs: forward output and the three gradients.
struct Products {
  std::vector<float> out, dinp, dweight, dbias;
};

Products run(LinearFormat& f, const std::vector<float>& W, const std::vector<float>& bias,
             const std::vector<float>& X, const std::vector<float>& dY) {
  f.refresh(W.data(), OC, IC);
  Products p{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC),
             std::vector<float>(W.size(), 0.0f), std::vector<float>(OC, 0.0f)};
  f.forward(p.out.data(), X.data(), W.data(), bias.data(), N, IC, OC);
  f.backward(p.dinp.data(), p.dweight.data(), p.dbias.data(), dY.data(), X.data(), W.data(), N, IC,
             OC, false);
  return p;
}

struct Inputs {
  std::vector<double> W = random_vector(size_t(OC) * IC, 1), bias = random_vector(OC, 2),
                      X = random_vector(size_t(N) * IC, 3), dY = random_vector(size_t(N) * OC, 4);
  std::vector<float> w = to_float(W), b = to_float(bias), x = to_float(X), dy = to_float(dY);
};

}  // namespace

TEST(DenseFormat, IsTheDenseMatmul) {
  const Inputs in;
  DenseFormat f;
  const Products got = run(f, in.w, in.b, in.x, in.dy);
  Products want{std::vector<float>(got.out.size()), std::vector<float>(got.dinp.size()),
                std::vector<float>(got.dweight.size(), 0.0f), std::vector<float>(OC, 0.0f)};
  kernels::matmul_forward(want.out.data(), in.x.data(), in.w.data(), in.b.data(), N, IC, OC);
  kernels::matmul_backward(want.dinp.data(), want.dweight.data(), want.dbias.data(), in.dy.data(),
                           in.x.data(), in.w.data(), N, IC, OC, false);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.dinp, want.dinp);
  EXPECT_EQ(got.dweight, want.dweight);
  EXPECT_EQ(got.dbias, want.dbias);
  EXPECT_EQ(f.forward_density(), 1.0);
  EXPECT_EQ(f.backward_input_density(), 1.0);
  EXPECT_EQ(f.weight_grad_density(), 1.0);
}
