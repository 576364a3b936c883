// bench_matmul: the matmul family's GEMM paths on every GEMM shape of a `frugal bench` preset's
// training step (each linear layer's forward, input gradient and weight gradient, and the LM head's
// three when the vocabulary is large): OpenBLAS (OpenMP build), oneDNN's dnnl_sgemm, oneDNN's
// matmul primitive (created once per shape), and the path kernels/cpu/gemm.cpp's sgemm chooses.
// Calls are interleaved and repeated so all see the same machine load; prints the median GFLOP/s
// (2·M·N·K / time) of each, and per preset the GEMM milliseconds of one step for each path
// (shapes weighted by how often a step runs them). Built only when oneDNN is found.
// Usage: bench_matmul [threads=2] [repetitions=15]
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernel_bench.h"

namespace {

namespace cpu = frugal::kernels::cpu;

struct Shape {
  const char* layer;
  const char* pass;
  bool ta, tb;  // row-major: C (M,N) = op(A) · op(B) + beta · C
  int M, N, K;
  float beta;  // as kernels/cpu/matmul.cpp and lm_head.cpp call it
  int per_step;
};

// A linear layer in → out over N rows, as kernels/cpu/matmul.cpp runs it: the forward
// out = inp · Wᵀ added to the broadcast bias (beta 1), the input gradient dinp = dout · W (beta
// 0), the weight gradient dW += doutᵀ · inp (beta 1: it accumulates).
void add_linear(std::vector<Shape>& shapes, const char* layer, int N, int in, int out, int per_step) {
  shapes.push_back({layer, "fwd", false, true, N, out, in, 1, per_step});
  shapes.push_back({layer, "dinp", false, false, N, in, out, 0, per_step});
  shapes.push_back({layer, "dW", true, false, out, in, N, 1, per_step});
}

std::vector<Shape> step_shapes(const frugal::bench::PresetShape& p, int layers) {
  std::vector<Shape> shapes;
  const int N = p.rows(), C = p.C;
  add_linear(shapes, "qkv", N, C, 3 * C, layers);
  add_linear(shapes, "attn proj", N, C, C, layers);
  add_linear(shapes, "fc", N, C, 4 * C, layers);
  add_linear(shapes, "fc proj", N, 4 * C, C, layers);
  // The tied LM head (kernels/cpu/lm_head.cpp, one chunk of rows here): logits = x · Wᵀ (beta 0),
  // dx = dlogits · W, dW += dlogitsᵀ · x. A 65-symbol head is not worth a row.
  if (p.V > 1000) {
    shapes.push_back({"lm head", "fwd", false, true, N, p.V, C, 0, 1});
    shapes.push_back({"lm head", "dinp", false, false, N, C, p.V, 0, 1});
    shapes.push_back({"lm head", "dW", true, false, p.V, C, N, 1, 1});
  }
  return shapes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv, 15);
  const int layers[] = {4, 6, 12};  // n_layer of presets S, M, L (bench/step.cpp)
  const char* paths[] = {"OpenBLAS", "dnnl_sgemm", "dnnl matmul", "sgemm()"};
  std::printf("%-21s %5s %5s %5s %11s %11s %11s %11s  (GFLOP/s)\n", "shape", "M", "N", "K", paths[0], paths[1],
              paths[2], paths[3]);
  for (int pi = 0; pi < 3; ++pi) {
    const auto& preset = frugal::bench::kPresets[pi];
    std::array<double, 4> step_ms{};
    for (const Shape& s : step_shapes(preset, layers[pi])) {
      auto a = frugal::bench::random_floats(size_t(s.M) * s.K, 1), b = frugal::bench::random_floats(size_t(s.K) * s.N, 2);
      std::vector<float> c(size_t(s.M) * s.N, 0.0f);
      const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
      const std::array<std::function<void()>, 4> calls = {
          [&] {
            cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N,
                        s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N);
          },
          [&] { cpu::onednn_sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N); },
          [&] { cpu::onednn_matmul(s.ta, s.tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, nullptr, s.beta != 0, c.data(), s.N); },
          [&] { cpu::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N); },
      };
      // One untimed call of each: the first call of a shape pays packing buffers and, for
      // oneDNN, kernel generation (the matmul primitive's creation).
      for (const auto& call : calls) call();
      std::array<std::vector<double>, 4> seconds;
      for (int r = 0; r < reps; ++r)
        for (size_t i = 0; i < calls.size(); ++i) {
          frugal::Timer t;
          calls[i]();
          seconds[i].push_back(t.seconds());
        }
      const double flops = 2.0 * s.M * s.N * s.K;
      std::printf("%c %-9s %-9s %5d %5d %5d", preset.name[0], s.layer, s.pass, s.M, s.N, s.K);
      for (size_t i = 0; i < calls.size(); ++i) {
        const double m = median(seconds[i]);
        std::printf(" %11.1f", flops / m * 1e-9);
        step_ms[i] += m * 1e3 * s.per_step;
      }
      std::printf("\n");
    }
    std::printf("%s: GEMM ms per training step", preset.name);
    for (size_t i = 0; i < step_ms.size(); ++i) std::printf("  %s %.1f", paths[i], step_ms[i]);
    std::printf("\n");
  }
  return 0;
}
