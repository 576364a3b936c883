// The mixture-of-experts kernels on CPU (ops.h section moe): the router and the row permutations
// run in parallel over tokens, each token's rows in a fixed order (so any thread count gives the
// same bits); the grouped linear is one dense GEMM per expert on its contiguous rows
// (matmul_avx2): with dropless routing an expert's rows are one block (N·k/E of them on average),
// which the GEMM library runs near its peak when it is large, so a fused grouped kernel would save
// only the per-call overhead (bench/bench_moe.cpp measures the loop against one GEMM over all
// rows). With as many experts as threads, the experts run side by side, one thread each.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/ops.h"
#include "frugal/kernels/ref/moe_ref.h"

namespace frugal::kernels::cpu {
namespace {

void router_forward(float* probs, float* lse, int32_t* expert, float* weight, const float* logits,
                    const float* bias, int N, int E, int k) {
  FRUGAL_PROFILE("moe router fwd");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* z = logits + size_t(n) * E;
    float* p = probs + size_t(n) * E;
    float mx = z[0];
    for (int e = 1; e < E; ++e) mx = std::fmax(mx, z[e]);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(z[e] - mx);
    const float inv = 1.0f / sum;
    for (int e = 0; e < E; ++e) p[e] *= inv;
    lse[n] = mx + std::log(sum);
    // top-k by insertion into a list kept best first; a later expert enters only when strictly
    // better, so equal scores keep the lower index first
    float score[kMaxExperts];
    int32_t* ex = expert + size_t(n) * k;
    int kept = 0;
    for (int e = 0; e < E; ++e) {
      const float s = bias ? p[e] + bias[e] : p[e];
      int at = kept;
      while (at > 0 && s > score[at - 1]) --at;
      if (at >= k) continue;
      for (int i = std::min(kept, k - 1); i > at; --i) score[i] = score[i - 1], ex[i] = ex[i - 1];
      score[at] = s;
      ex[at] = e;
      kept = std::min(kept + 1, k);
    }
    float chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[ex[j]];
    for (int j = 0; j < k; ++j) weight[size_t(n) * k + j] = p[ex[j]] / chosen;
  }
}

void router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                     const int32_t* expert, const float* weight, const float* dprobs, float dlse, int N,
                     int E, int k) {
  FRUGAL_PROFILE("moe router bwd");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* p = probs + size_t(n) * E;
    const int32_t* ex = expert + size_t(n) * k;
    const float* g = dweight + size_t(n) * k;
    const float* w = weight + size_t(n) * k;
    float dp[kMaxExperts];
    for (int e = 0; e < E; ++e) dp[e] = dprobs ? dprobs[e] : 0.0f;
    float S = 0, gw = 0;
    for (int j = 0; j < k; ++j) S += p[ex[j]], gw += g[j] * w[j];
    for (int j = 0; j < k; ++j) dp[ex[j]] += (g[j] - gw) / S;
    float dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * dp[e];
    const float z = dlse * lse[n] - dot;
    for (int e = 0; e < E; ++e) dlogits[size_t(n) * E + e] = p[e] * (dp[e] + z);
  }
}

void permute(float* out, const float* inp, const int32_t* src, int R, int C) {
  FRUGAL_PROFILE("moe permute");
#pragma omp parallel for schedule(static)
  for (int i = 0; i < R; ++i) std::memcpy(out + size_t(i) * C, inp + size_t(src[i]) * C, sizeof(float) * C);
}

void unpermute(float* out, const float* inp, const int32_t* pos, const float* weight, int N, int k, int C,
               bool accumulate) {
  FRUGAL_PROFILE("moe unpermute");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* o = out + size_t(n) * C;
    if (!accumulate) std::memset(o, 0, sizeof(float) * C);
    for (int j = 0; j < k; ++j) {
      const float w = weight ? weight[size_t(n) * k + j] : 1.0f;
      const float* x = inp + size_t(pos[size_t(n) * k + j]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += w * x[c];
    }
  }
}

void unpermute_backward(float* dinp, float* dweight, const float* dout, const float* inp, const int32_t* pos,
                        const float* weight, int N, int k, int C) {
  FRUGAL_PROFILE("moe unpermute bwd");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* d = dout + size_t(n) * C;
    for (int j = 0; j < k; ++j) {
      const size_t row = size_t(pos[size_t(n) * k + j]);
      const float w = weight[size_t(n) * k + j];
      const float* x = inp + row * C;
      float* dx = dinp + row * C;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) {
        dx[c] = w * d[c];
        dot += d[c] * x[c];
      }
      dweight[size_t(n) * k + j] = dot;
    }
  }
}

// Calls f(e, first row, rows) for every expert that received rows. With at least as many experts
// as threads they run side by side, one thread each, dynamically scheduled (which also absorbs an
// uneven load): on 2 threads faster than each GEMM split over both, for preset S's 192 x 128 x 256
// per expert (`frugal bench --kernel moe`: 0.53 -> 0.82 of the dense MLP's tokens/s) and for
// preset M's 512 x 384 x 768 (0.85-0.88 -> 0.91-0.98). Otherwise one after the other, each on
// every thread. An expert's GEMM gives the same bits whichever thread runs it, so for a given
// thread count the schedule changes no result. side_by_side = false: always one after the other
// (the bf16 GEMMs run oneDNN matmul primitives, whose library-managed scratchpad is not made for
// concurrent executions: run side by side they gave wrong products in ~2% of runs).
template <class F>
void run_expert_groups(const int32_t* offsets, int E, F&& f, bool side_by_side = true) {
  if (!side_by_side || E < omp_get_max_threads()) {
    ref::for_each_expert_group(offsets, E, f);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int e = 0; e < E; ++e)
    if (offsets[e + 1] > offsets[e]) f(e, size_t(offsets[e]), offsets[e + 1] - offsets[e]);
}

void grouped_forward(float* out, const float* inp, const float* weight, const float* bias,
                     const int32_t* offsets, int E, int C, int OC) {
  FRUGAL_PROFILE("moe grouped fwd");
  run_expert_groups(offsets, E, [&](int e, size_t r0, int rows) {
    matmul_avx2.forward(out + r0 * OC, inp + r0 * C, weight + size_t(e) * OC * C,
                        bias ? bias + size_t(e) * OC : nullptr, rows, C, OC);
  });
}

void grouped_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* weight, const int32_t* offsets, int E, int C, int OC, bool accumulate_dinp) {
  FRUGAL_PROFILE("moe grouped bwd");
  run_expert_groups(offsets, E, [&](int e, size_t r0, int rows) {
    matmul_avx2.backward(dinp ? dinp + r0 * C : nullptr, dweight ? dweight + size_t(e) * OC * C : nullptr,
                         dbias ? dbias + size_t(e) * OC : nullptr, dout + r0 * OC, inp + r0 * C,
                         weight + size_t(e) * OC * C, rows, C, OC, accumulate_dinp);
  });
}

// rows (n floats) rounded into this thread's buffer `which` (0: inputs, 1: output gradients)
const bf16* rounded_rows(const float* x, size_t n, int which) {
  thread_local std::vector<bf16> buffers[2];
  std::vector<bf16>& b = buffers[which];
  b.resize(n);
  kernels::f32_to_bf16(b.data(), x, n);
  return b.data();
}

void grouped_forward_bf16(float* out, const float* inp, const bf16* weight, const float* bias,
                          const int32_t* offsets, int E, int C, int OC) {
  FRUGAL_PROFILE("moe grouped fwd");
  run_expert_groups(offsets, E, [&](int e, size_t r0, int rows) {
    cpu::matmul_bf16_forward(out + r0 * OC, rounded_rows(inp + r0 * C, size_t(rows) * C, 0),
                             weight + size_t(e) * OC * C, bias ? bias + size_t(e) * OC : nullptr, rows, C, OC);
  }, false);
}

void grouped_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                           const bf16* weight, const int32_t* offsets, int E, int C, int OC, bool accumulate_dinp) {
  FRUGAL_PROFILE("moe grouped bwd");
  run_expert_groups(offsets, E, [&](int e, size_t r0, int rows) {
    cpu::matmul_bf16_backward(dinp ? dinp + r0 * C : nullptr, dweight ? dweight + size_t(e) * OC * C : nullptr,
                              rounded_rows(dout + r0 * OC, size_t(rows) * OC, 1),
                              dweight ? rounded_rows(inp + r0 * C, size_t(rows) * C, 0) : nullptr,
                              weight + size_t(e) * OC * C, rows, C, OC, accumulate_dinp);
    if (dbias)
      matmul_avx2.backward(nullptr, nullptr, dbias + size_t(e) * OC, dout + r0 * OC, nullptr, nullptr, rows, C, OC,
                           false);
  }, false);
}

}  // namespace

const MoeKernels moe_avx2{&router_forward, &router_backward, &permute, &unpermute,
                          &unpermute_backward, &grouped_forward, &grouped_backward,
                          &grouped_forward_bf16, &grouped_backward_bf16};

}  // namespace frugal::kernels::cpu
