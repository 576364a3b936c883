// Muon (optim/muon.h) as the session's optimizer: which tensors it takes, every step of a 2-layer
// model against a naive fp64 implementation of Muon + AdamW written here from the formulas, the
// frozen prefix left alone, the non-Nesterov form, a step's tensors spread over the threads, and
// the start-up refusals of what it does not run with.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ref/adamw_ref.h"
#include "frugal/kernels/ref/newton_schulz_ref.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"
#include "frugal/train/run_config.h"
#include "error_of.h"
#include "gradcheck.h"

using namespace frugal;
using frugal::testing::random_normal_floats;

namespace {

// Biases, a gated MLP (tall c_fc / c_gate, wide c_proj, tall q|k|v) and an untied head.
ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 13, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  c.mlp = MlpKind::Swiglu, c.tied_head = false, c.bias = true;
  return c;
}

// Written out by hand rather than from TensorSpec::hidden_matrix, which this checks.
bool is_hidden_matrix(const std::string& name) {
  for (const char* suffix : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_gate.weight",
                             "mlp.c_proj.weight"})
    if (name.starts_with("transformer.h.") && name.ends_with(suffix)) return true;
  return false;
}

AdamWConfig muon_config(bool nesterov, bool bf16 = false, int ns_steps = 5) {
  AdamWConfig oc;
  oc.lr = 3e-3f, oc.weight_decay = 0.1f, oc.grad_clip = 0;
  oc.muon = {.enabled = true, .lr = 0.05f, .momentum = 0.9f, .nesterov = nesterov, .ns_steps = ns_steps,
             .weight_decay = 0.2f, .bf16 = bf16};
  return oc;
}

// One step of Muon + AdamW in fp64 from the formulas of docs/optim.md: p, m, v of the whole table.
void reference_step(const ParamTable& table, const AdamWConfig& oc, std::vector<double>& p, const std::vector<double>& g,
                    std::vector<double>& m, std::vector<double>& v, double lr, int64_t t) {
  for (const ParamInfo& e : table.entries()) {
    double* pe = p.data() + e.offset;
    const double* ge = g.data() + e.offset;
    double* me = m.data() + e.offset;
    if (!is_hidden_matrix(e.name)) {
      kernels::ref::adamw_update<double>(pe, ge, me, v.data() + e.offset, e.numel, lr, oc.beta1, oc.beta2, oc.eps,
                                         oc.weight_decay, t, e.decays());
      continue;
    }
    const int R = int(e.local[0]), C = int(e.local[1]);
    const double beta = oc.muon.momentum, mu_lr = lr * oc.muon.lr / oc.lr;
    std::vector<double> u(e.numel);
    for (size_t i = 0; i < e.numel; ++i) {
      me[i] = beta * me[i] + (1 - beta) * ge[i];
      u[i] = oc.muon.nesterov ? (1 - beta) * ge[i] + beta * me[i] : me[i];
    }
    (oc.muon.bf16 ? kernels::ref::newton_schulz_bf16<double> : kernels::ref::newton_schulz<double>)(
        u.data(), R, C, oc.muon.ns_steps);
    const double scale = std::sqrt(std::max(1.0, double(R) / C));
    for (size_t i = 0; i < e.numel; ++i) pe[i] = (1 - mu_lr * oc.muon.weight_decay) * pe[i] - mu_lr * scale * u[i];
  }
}

std::vector<double> to_double(const float* x, size_t n) { return std::vector<double>(x, x + n); }

double max_abs_difference(const float* a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

// Six steps on real gradients of the 2-layer model: before each, the fp64 reference starts from
// the optimizer's own state; after it, both moment buffers agree within 1e-6. Returns the weights'
// largest difference over the steps. bf16 / reference_bf16: Newton–Schulz on bf16 operands in the
// optimizer / the reference; ns_steps its iterations.
double steps_difference_from_reference(bool nesterov, bool bf16 = false, bool reference_bf16 = false,
                                       int ns_steps = 5) {
  const ModelConfig config = small_config();
  GPT model(config);
  model.init_weights(5);
  const int B = 2, T = 8;
  model.plan(B, T);
  const AdamWConfig oc = muon_config(nesterov, bf16, ns_steps);
  AdamW optim(model.table(), oc);
  AdamWConfig reference_config = oc;
  reference_config.muon.bf16 = reference_bf16;
  const size_t total = model.table().total();
  std::vector<int32_t> tokens(B * T + 1);
  double largest_update = 0, largest_difference = 0;
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(mix64(step * 131 + i) % config.vocab_size);
    model.zero_grad();
    model.forward(tokens.data(), tokens.data() + 1, 1.0f);
    model.backward();
    std::vector<double> p = to_double(model.params(), total), g = to_double(model.grads(), total);
    std::vector<double> m = to_double(optim.m(), total), v = to_double(optim.v(), total);
    const std::vector<double> before = p;
    const float lr = 0.7f * oc.lr;  // a scheduled step: Muon's rate scales with it
    optim.update(model.params(), model.grads(), 0, lr);
    reference_step(model.table(), reference_config, p, g, m, v, lr, step + 1);
    largest_difference = std::max(largest_difference, max_abs_difference(model.params(), p));
    EXPECT_LT(max_abs_difference(optim.m(), m), 1e-6) << "step " << step;
    EXPECT_LT(max_abs_difference(optim.v(), v), 1e-6) << "step " << step;
    for (size_t i = 0; i < total; ++i) largest_update = std::max(largest_update, std::fabs(p[i] - before[i]));
  }
  EXPECT_GT(largest_update, 1e-3) << "the steps must move the weights for the comparison to mean something";
  return largest_difference;
}

}  // namespace

TEST(Muon, TakesTheBlocksHiddenMatricesOnly) {
  const ParamTable table = ParamTable::build(small_config());
  int matrices = 0;
  for (const ParamInfo& e : table.entries()) {
    EXPECT_EQ(muon_matrices(e).count > 0, is_hidden_matrix(e.name)) << e.name;
    matrices += muon_matrices(e).count;
  }
  EXPECT_EQ(matrices, 2 * 5);
}

TEST(Muon, NesterovStepsMatchAnFp64Reference) { EXPECT_LT(steps_difference_from_reference(true), 1e-6); }
TEST(Muon, PlainMomentumStepsMatchAnFp64Reference) { EXPECT_LT(steps_difference_from_reference(false), 1e-6); }
// optim.muon.precision = "bf16": the same steps with Newton–Schulz on bf16 operands, against the
// fp64 reference with the same roundings, with one iteration (a sum near a bf16 rounding boundary
// may round to neighbouring values in the kernel and the reference, and each further iteration
// amplifies that: Kernels.NewtonSchulzBf16MatchesItsReferenceAndStaysCloseToFp32). Within 2e-5 of
// the weights (measured 6e-8; 6e-6 on the reference path, whose fp32 sums round near a boundary
// otherwise), while fp32 Newton–Schulz misses that reference by 1.6e-4: the steps did run in bf16.
TEST(Muon, Bf16NewtonSchulzStepsMatchTheReferenceOfTheirRoundings) {
  const double bf16 = steps_difference_from_reference(true, true, true, 1);
  const double fp32 = steps_difference_from_reference(true, false, true, 1);
  std::printf("weights' largest difference from the bf16 reference: bf16 steps %.3g, fp32 steps %.3g\n", bf16, fp32);
  EXPECT_LT(bf16, 2e-5);
  EXPECT_GT(fp32, 2e-5);
}

// A step's tensors spread over two threads (each thread taking whole tensors, its products then
// single-threaded): every tensor gets the update it gets alone, where its products ran on both
// threads, to float rounding; and a repeated step gives the same bits whichever thread took which
// tensor.
TEST(Muon, TensorsUpdatedTogetherMatchOneAtATimeAndRepeatBitForBit) {
  const int threads_before = num_threads();
  set_num_threads(2);
  const std::vector<std::pair<int, int>> shapes = {{96, 32}, {32, 32}, {128, 32}, {32, 128}, {48, 16}, {16, 48}};
  struct Copy {
    std::vector<std::vector<float>> p, buf;
    std::vector<MuonTensor> tensors;
  };
  std::vector<std::vector<float>> grads;
  std::vector<Copy> copies(3);  // updated together, one at a time, together again
  for (size_t i = 0; i < shapes.size(); ++i) {
    const size_t n = size_t(shapes[i].first) * shapes[i].second;
    const std::vector<float> p = random_normal_floats(n, 3 * i), buf = random_normal_floats(n, 3 * i + 2);
    grads.push_back(random_normal_floats(n, 3 * i + 1));
    for (Copy& c : copies) c.p.push_back(p), c.buf.push_back(buf);
  }
  for (Copy& c : copies)
    for (size_t i = 0; i < shapes.size(); ++i)
      c.tensors.push_back({c.p[i].data(), grads[i].data(), c.buf[i].data(), {1, shapes[i].first, shapes[i].second}});
  const MuonConfig config{.enabled = true, .weight_decay = 0.1f};
  for (int step = 0; step < 2; ++step) {
    muon_update(copies[0].tensors, config, 0.02f);
    for (const MuonTensor& t : copies[1].tensors) muon_update({t}, config, 0.02f);
    muon_update(copies[2].tensors, config, 0.02f);
  }
  set_num_threads(threads_before);
  double largest = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(copies[0].p[i], copies[2].p[i]) << i;
    EXPECT_EQ(copies[0].buf[i], copies[2].buf[i]) << i;
    for (size_t j = 0; j < copies[0].p[i].size(); ++j)
      largest = std::max(largest, double(std::fabs(copies[0].p[i][j] - copies[1].p[i][j])));
  }
  std::printf("largest difference from one tensor at a time: %.3g\n", largest);
  EXPECT_LT(largest, 1e-6);
}

// Tensors before `begin` (a frozen prefix) are neither decayed nor moved, Muon's included; their
// momentum stays zero.
TEST(Muon, UpdateLeavesTheFrozenPrefixAlone) {
  const ParamTable table = ParamTable::build(small_config());
  AdamW optim(table, muon_config(true));
  std::vector<float> params(table.total(), 1.0f), grads(table.total());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * float(i % 7) - 0.025f;  // never zero
  const size_t begin = table.layer_range(1).first;
  optim.update(params.data(), grads.data(), begin, 1e-3f);
  for (const ParamInfo& e : table.entries()) {
    const bool frozen = e.offset < begin;
    EXPECT_EQ(params[e.offset] == 1.0f, frozen) << e.name;
    EXPECT_EQ(optim.m()[e.offset] == 0.0f, frozen) << e.name;
  }
}

// An expert tensor (E, H, C) is E matrices, each orthogonalised alone.
TEST(Muon, ExpertTensorsAreOneMatrixPerExpert) {
  ModelConfig c = small_config();
  c.moe.experts = 3, c.moe.top_k = 2, c.moe.hidden = 24;
  const ParamTable table = ParamTable::build(c);
  const ParamInfo& fc = table.at("transformer.h.0.mlp.experts.c_fc.weight");
  const MuonMatrices shape = muon_matrices(fc);
  EXPECT_EQ(shape.count, 3);
  EXPECT_EQ(shape.rows, 24);
  EXPECT_EQ(shape.cols, 16);
  EXPECT_EQ(shape.numel(), fc.numel);
  EXPECT_EQ(muon_matrices(table.at("transformer.h.0.mlp.router.weight")).count, 0);
}

// 2:4's masked decay (a gradient term) and tensor-parallel slices are refused at start-up, one
// line each; freezing, MST and the V-cycle run (tests/test_mst.cpp, tests/test_multilevel_vcycle.cpp).
TEST(Muon, RefusesWhatItDoesNotRunWith) {
  const auto settings = [](std::vector<std::string> extra) {
    extra.push_back("optim.name=muon");
    return run_settings(io::Config::load(run_schema(), "", extra));
  };
  const std::string sparse24 = frugal::testing::error_of([&] { settings({"methods.sparse24={}"}); });
  EXPECT_NE(sparse24.find("methods.sparse24 does not run with optim.name = \"muon\""), std::string::npos) << sparse24;
  const std::string tensor = frugal::testing::error_of([&] { settings({"parallel.tensor=2"}); });
  EXPECT_NE(tensor.find("optim.name = \"muon\" does not run with parallel.tensor = 2"), std::string::npos) << tensor;
  for (const char* method : {"methods.freeze.frozen_layers=1", "methods.mst={}", "methods.multilevel={}"})
    EXPECT_TRUE(settings({method}).optim.muon.enabled) << method;
  EXPECT_FALSE(run_settings(io::Config::load(run_schema(), "", {})).optim.muon.enabled);
}
