// The presets of `frugal bench --preset S|M|L` (bench/step.cpp builds their run configs from this
// table) and the GEMMs one training step of a preset runs, for the kernel benchmarks. No frugal
// headers but the dependency-free kernels/lm_head_chunks.h: tools/compare_gemm_libraries.sh compiles
// bench/gemm_library_rate.cpp against other libraries with these headers alone.
#pragma once
#include <vector>

#include "frugal/kernels/lm_head_chunks.h"

namespace frugal::bench {

// B sequences of T tokens, width C, vocabulary V, `layers` transformer blocks of `heads` heads;
// `frugal bench` times `steps` steps after `warmup` untimed ones.
struct PresetShape {
  const char* name;
  int B, T, C, V, layers, heads, warmup, steps;
  int rows() const { return B * T; }  // N
};
// L is GPT-2 small.
inline constexpr PresetShape kPresets[] = {{"S", 12, 64, 128, 65, 4, 4, 5, 30},
                                           {"M", 8, 256, 384, 65, 6, 6, 3, 10},
                                           {"L", 4, 64, 768, 50257, 12, 12, 2, 5}};

// One GEMM of a training step, row-major: C (M,N) = op(A) · op(B) + beta · C.
struct GemmShape {
  const char* layer;
  const char* pass;
  bool trans_a, trans_b;
  int M, N, K;
  float beta;  // as kernels/cpu/matmul.cpp and lm_head.cpp call it
  int per_step;
  double flops() const { return 2.0 * M * N * K; }
};

// A linear layer in -> out over N rows, as kernels/cpu/matmul.cpp runs it: the forward
// out = inp · Wᵀ (+ bias: beta 1 where the bias is broadcast first), the input gradient
// dinp = dout · W (beta 0), the weight gradient dW += doutᵀ · inp (beta 1: it accumulates).
inline void add_linear(std::vector<GemmShape>& shapes, const char* layer, int N, int in, int out, int per_step) {
  shapes.push_back({layer, "fwd", false, true, N, out, in, 1, per_step});
  shapes.push_back({layer, "dinp", false, false, N, in, out, 0, per_step});
  shapes.push_back({layer, "dW", true, false, out, in, N, 1, per_step});
}

// Every GEMM of one training step of preset p: each block's four linear layers and, for a large
// vocabulary, the tied LM head's three per chunk of rows (kernels/cpu/lm_head.cpp, the fp32 path:
// logits = x · Wᵀ, dx = dlogits · W, dW += dlogitsᵀ · x; a 65-symbol head is not worth a row).
inline std::vector<GemmShape> step_gemm_shapes(const PresetShape& p) {
  std::vector<GemmShape> shapes;
  const int N = p.rows(), C = p.C;
  add_linear(shapes, "qkv", N, C, 3 * C, p.layers);
  add_linear(shapes, "attn_proj", N, C, C, p.layers);
  add_linear(shapes, "fc", N, C, 4 * C, p.layers);
  add_linear(shapes, "fc_proj", N, 4 * C, C, p.layers);
  if (p.V > 1000) {
    const int rows = kernels::lm_head_chunk_rows(N, p.V), chunks = (N + rows - 1) / rows;
    shapes.push_back({"lm_head", "fwd", false, true, rows, p.V, C, 0, chunks});
    shapes.push_back({"lm_head", "dinp", false, false, rows, C, p.V, 0, chunks});
    shapes.push_back({"lm_head", "dW", true, false, p.V, C, rows, 1, chunks});
  }
  return shapes;
}

}  // namespace frugal::bench
