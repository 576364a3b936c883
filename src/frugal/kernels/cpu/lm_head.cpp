// Fused LM head + softmax cross-entropy on CPU. Rows are processed in chunks sized so the chunk's
// logits stay within a fixed scratch budget; no (N,V) logits buffer is ever allocated. Per chunk:
// logits = x · W[:V]ᵀ (GEMM) (+ the output bias, when given), a vectorised stable softmax per row
// turning logits into dlogits = (p - onehot) * dloss in place, then dx = dlogits · W[:V],
// dW[:V] += dlogitsᵀ · x and the bias gradient += the column sums of dlogits.
// With the bf16 working copy of the weight the three GEMMs take bf16 operands (the chunk's rows and
// its logits' gradient rounded as they enter them); everything between them is the same fp32 code.
// The vocabulary-split version runs the softmax's three row passes (max, exponentials, scale) over
// the whole chunk each, with the group's reductions of the rows' statistics between them.
// With a logit soft-cap the rows are capped as the GEMM leaves them, and the gradient pass computes
// the exponentials again from the capped logits (instead of storing them) so that the cap's slope
// 1 − (z / cap)² can be formed without a second buffer.

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/kernels/cpu/bf16.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/lm_head_chunks.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels::cpu {
namespace {

// The row's largest logit.
float row_max(const float* z, int V) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int v = 0;
  for (; v + 8 <= V; v += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(z + v));
  float mx = -INFINITY;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  for (float l : lanes) mx = std::max(mx, l);
  for (int r = v; r < V; ++r) mx = std::max(mx, z[r]);
  return mx;
}

// Σ exp(z - mx) over the row; when `store`, the row becomes its exponentials.
float row_exp_sum(float* z, int V, float mx, bool store) {
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  int v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(z + v), vm));
    if (store) _mm256_storeu_ps(z + v, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum256(vsum);
  for (int r = v; r < V; ++r) {
    const float e = std::exp(z[r] - mx);
    if (store) z[r] = e;
    sum += e;
  }
  return sum;
}

// z (V) *= scale
void row_scale(float* z, int V, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  int v = 0;
  for (; v + 8 <= V; v += 8) _mm256_storeu_ps(z + v, _mm256_mul_ps(_mm256_loadu_ps(z + v), vs));
  for (int r = v; r < V; ++r) z[r] *= scale;
}

// z (V) = cap · tanh(z / cap), in place.
void softcap_row(float* z, size_t V, float cap) {
  const __m256 vc = _mm256_set1_ps(cap), vinv = _mm256_set1_ps(1.0f / cap);
  size_t v = 0;
  for (; v + 8 <= V; v += 8)
    _mm256_storeu_ps(z + v, _mm256_mul_ps(vc, tanh256(_mm256_mul_ps(_mm256_loadu_ps(z + v), vinv))));
  for (; v < V; ++v) z[v] = cap * std::tanh(z[v] / cap);
}

// d (capped logit) / d (logit) at a capped logit z: 1 − tanh² = 1 − (z / cap)².
float softcap_slope(float z, float cap) { return 1.0f - (z / cap) * (z / cap); }

// The capped row's softmax gradient without the one-hot: z (V, capped logits) becomes
// exp(z − mx) · scale · (1 − (z / cap)²).
void capped_softmax_grad_row(float* z, int V, float mx, float scale, float cap) {
  const __m256 vm = _mm256_set1_ps(mx), vs = _mm256_set1_ps(scale), vinv = _mm256_set1_ps(1.0f / cap),
               one = _mm256_set1_ps(1.0f);
  int v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 x = _mm256_loadu_ps(z + v), t = _mm256_mul_ps(x, vinv);
    const __m256 slope = _mm256_sub_ps(one, _mm256_mul_ps(t, t));
    _mm256_storeu_ps(z + v, _mm256_mul_ps(_mm256_mul_ps(exp256(_mm256_sub_ps(x, vm)), vs), slope));
  }
  for (; v < V; ++v) z[v] = std::exp(z[v] - mx) * scale * softcap_slope(z[v], cap);
}

// The row's gradient once its maximum, sum of exponentials and target logit are known: z (V) becomes
// (softmax − onehot(target)) · dloss (through the cap when cap > 0). With cap 0 the row must hold
// its exponentials already (row_exp_sum with store); with a cap, its capped logits. target: this
// row's column of the target, or −1 when another rank holds it.
void softmax_grad_row(float* z, int V, int target, float target_logit, float mx, float sum, float dloss,
                      float cap) {
  if (cap > 0) {
    capped_softmax_grad_row(z, V, mx, dloss / sum, cap);
    if (target >= 0) z[target] -= dloss * softcap_slope(target_logit, cap);
  } else {
    row_scale(z, V, dloss / sum);
    if (target >= 0) z[target] -= dloss;
  }
}

// In place on one row of V logits (capped already when cap > 0): returns -log p[target]; when
// want_grad the row becomes its gradient (softmax_grad_row).
float softmax_xent_row(float* z, int V, int target, float dloss, bool want_grad, float cap) {
  const float target_logit = z[target];  // read before the row is overwritten
  const float mx = row_max(z, V);
  const float sum = row_exp_sum(z, V, mx, want_grad && cap == 0);
  const float loss = mx + std::log(sum) - target_logit;
  if (want_grad) softmax_grad_row(z, V, target, target_logit, mx, sum, dloss, cap);
  return loss;
}

// The head's three GEMMs on a chunk of rows (from row r0), on fp32 operands.
class F32Gemms {
 public:
  F32Gemms(const float* weight, int C, int V) : w_(weight), C_(C), V_(V) {}
  // z (rows,V) = x (rows,C) · W[:V]ᵀ
  void logits(int /*r0*/, const float* x, int rows, float* z) {
    cpu::sgemm(false, true, rows, V_, C_, 1.0f, x, C_, w_, C_, 0.0f, z, V_);
  }
  // dx (rows,C) = dz · W[:V] (dx may be null); dW[:V] += dzᵀ · x (dw may be null); x: this chunk's,
  // as given to logits().
  void backward(int /*r0*/, const float* dz, const float* x, int rows, float* dx, float* dw) {
    if (dx) cpu::sgemm(false, false, rows, C_, V_, 1.0f, dz, V_, w_, C_, 0.0f, dx, C_);
    if (dw) cpu::sgemm(true, false, V_, C_, rows, 1.0f, dz, V_, x, C_, 1.0f, dw, C_);
  }
  void finish(float* /*dw*/) {}  // after the last chunk

 private:
  const float* w_;
  int C_, V_;
};

// The same on bf16 operands: x rounded in logits(), dz rounded in backward(), sums in fp32. The
// rounded rows and gradients of every chunk are kept (bf16: half the fp32 logits scratch's bytes
// per row), so that the weight gradient is one GEMM over all N rows in finish(): dW[:V] (fp32,
// V × C: 154 MB for GPT-2) is read and written once a step, not once per chunk.
class Bf16Gemms {
 public:
  Bf16Gemms(const bf16* weight, int N, int C, int V) : w_(weight), N_(N), C_(C), V_(V), x_(size_t(N) * C) {}
  void logits(int r0, const float* x, int rows, float* z) {
    bf16* x16 = x_.data() + size_t(r0) * C_;
    kernels::f32_to_bf16(x16, x, size_t(rows) * C_);
    cpu::matmul_bf16_forward(z, x16, w_, nullptr, rows, C_, V_);
  }
  void backward(int r0, const float* dz, const float* /*x: rounded in logits()*/, int rows, float* dx, float* dw) {
    if (!dx && !dw) return;
    dz_.resize(size_t(dw ? N_ : rows) * V_);
    bf16* dz16 = dz_.data() + (dw ? size_t(r0) * V_ : 0);
    kernels::f32_to_bf16(dz16, dz, size_t(rows) * V_);
    if (dx) cpu::matmul_bf16_backward(dx, nullptr, dz16, nullptr, w_, rows, C_, V_, false);
    weight_grad_ = dw != nullptr;
  }
  void finish(float* dw) {
    if (weight_grad_) cpu::matmul_bf16_backward(nullptr, dw, dz_.data(), x_.data(), w_, N_, C_, V_, false);
  }

 private:
  const bf16* w_;
  int N_, C_, V_;
  std::vector<bf16> x_, dz_;  // (N,C) and (N,V) (the chunk's (rows,V) without a weight gradient)
  bool weight_grad_ = false;
};

// z (V) += b (V)
void row_add(float* z, const float* b, int V) {
  int v = 0;
  for (; v + 8 <= V; v += 8) _mm256_storeu_ps(z + v, _mm256_add_ps(_mm256_loadu_ps(z + v), _mm256_loadu_ps(b + v)));
  for (; v < V; ++v) z[v] += b[v];
}

// db (V) += the column sums of dz (rows,V), each column's rows added in order (any thread count
// gives the same bits).
void add_column_sums(float* db, const float* dz, int rows, int V) {
#pragma omp parallel for schedule(static)
  for (int v0 = 0; v0 < V; v0 += 64) {
    const int n = std::min(64, V - v0);
    for (int i = 0; i < rows; ++i) row_add(db + v0, dz + static_cast<size_t>(i) * V + v0, n);
  }
}

template <class Gemms>
void cross_entropy_chunks(Gemms gemms, float* losses, float* dinp, float* dweight, const float* inp,
                          const int32_t* targets, int N, int C, int V, float dloss, float cap,
                          const LmHeadBias& bias) {
  FRUGAL_PROFILE("lm head + loss");
  const bool want_grad = dinp || dweight || bias.dbias;
  const int R = lm_head_chunk_rows(N, V);
  std::vector<float> logits(static_cast<size_t>(R) * V);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const float* x = inp + static_cast<size_t>(r0) * C;
    gemms.logits(r0, x, rows, logits.data());
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; ++i) {
      float* z = logits.data() + static_cast<size_t>(i) * V;
      const int target = targets[r0 + i];
      if (target < 0) {
        losses[r0 + i] = 0.0f;
        if (want_grad) std::fill(z, z + V, 0.0f);
        continue;
      }
      if (bias.bias) row_add(z, bias.bias, V);
      if (cap > 0) softcap_row(z, V, cap);
      losses[r0 + i] = softmax_xent_row(z, V, target, dloss, want_grad, cap);
    }
    if (bias.dbias) add_column_sums(bias.dbias, logits.data(), rows, V);
    if (dinp || dweight)
      gemms.backward(r0, logits.data(), x, rows, dinp ? dinp + static_cast<size_t>(r0) * C : nullptr, dweight);
  }
  gemms.finish(dweight);
}

template <class Gemms>
void cross_entropy_split_chunks(Gemms gemms, float* losses, float* dinp, float* dweight, const float* inp,
                                const int32_t* targets, int N, int C, int V, float dloss, const VocabSplit& split,
                                float cap) {
  FRUGAL_PROFILE("lm head + loss");
  const bool want_grad = dinp || dweight;
  const int R = lm_head_chunk_rows(N, split.whole);  // the same on every rank: the reductions pair up
  std::vector<float> logits(static_cast<size_t>(R) * V), mx(R), stats(2 * static_cast<size_t>(R));
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const float* x = inp + static_cast<size_t>(r0) * C;
    float* sum = stats.data();            // (rows) Σ exp(z - max) over the whole vocabulary
    float* target_logit = sum + rows;     // (rows) held by the rank owning the target, else 0
    if (V > 0) gemms.logits(r0, x, rows, logits.data());
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; ++i) {
      float* z = logits.data() + static_cast<size_t>(i) * V;
      const int t = targets[r0 + i] - split.first;
      if (cap > 0) softcap_row(z, V, cap);
      mx[i] = row_max(z, V);
      target_logit[i] = targets[r0 + i] >= 0 && t >= 0 && t < V ? z[t] : 0.0f;
    }
    split.all_reduce_max(mx.data(), rows);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; ++i)
      sum[i] = row_exp_sum(logits.data() + static_cast<size_t>(i) * V, V, mx[i], want_grad && cap == 0);
    split.all_reduce_sum(stats.data(), 2 * static_cast<size_t>(rows));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; ++i) {
      float* z = logits.data() + static_cast<size_t>(i) * V;
      const int target = targets[r0 + i], t = target - split.first;
      if (target < 0) {
        losses[r0 + i] = 0.0f;
        if (want_grad) std::fill(z, z + V, 0.0f);
        continue;
      }
      losses[r0 + i] = mx[i] + std::log(sum[i]) - target_logit[i];
      if (want_grad) softmax_grad_row(z, V, t >= 0 && t < V ? t : -1, target_logit[i], mx[i], sum[i], dloss, cap);
    }
    float* dx = dinp ? dinp + static_cast<size_t>(r0) * C : nullptr;
    if (dx && V == 0) std::fill(dx, dx + static_cast<size_t>(rows) * C, 0.0f);
    if (want_grad && V > 0) gemms.backward(r0, logits.data(), x, rows, dx, dweight);
  }
  if (V > 0) gemms.finish(dweight);
}

void lm_head_cross_entropy(float* losses, float* dinp, float* dweight, const float* inp,
                           const float* weight, const int32_t* targets, int N, int C, int V,
                           float dloss, float softcap, const LmHeadBias& bias) {
  cross_entropy_chunks(F32Gemms(weight, C, V), losses, dinp, dweight, inp, targets, N, C, V, dloss, softcap, bias);
}

void lm_head_cross_entropy_split(float* losses, float* dinp, float* dweight, const float* inp,
                                 const float* weight, const int32_t* targets, int N, int C, int V,
                                 float dloss, const VocabSplit& split, float softcap) {
  cross_entropy_split_chunks(F32Gemms(weight, C, V), losses, dinp, dweight, inp, targets, N, C, V, dloss, split,
                             softcap);
}

void lm_head_cross_entropy_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                const bf16* weight, const int32_t* targets, int N, int C, int V,
                                float dloss, float softcap, const LmHeadBias& bias) {
  cross_entropy_chunks(Bf16Gemms(weight, N, C, V), losses, dinp, dweight, inp, targets, N, C, V, dloss, softcap, bias);
}

void lm_head_cross_entropy_split_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                      const bf16* weight, const int32_t* targets, int N, int C, int V,
                                      float dloss, const VocabSplit& split, float softcap) {
  cross_entropy_split_chunks(Bf16Gemms(weight, N, C, V), losses, dinp, dweight, inp, targets, N, C, V, dloss,
                             split, softcap);
}

void lm_head_logits(float* logits, const float* inp, const float* weight, int N, int C, int V,
                    const float* bias) {
  cpu::sgemm(false, true, N, V, C, 1.0f, inp, C, weight, C, 0.0f, logits, V);
  if (!bias) return;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) row_add(logits + static_cast<size_t>(i) * V, bias, V);
}

void lm_head_softcap(float* logits, size_t n, float softcap) { softcap_row(logits, n, softcap); }

}  // namespace

const LmHeadKernels lm_head_avx2{&lm_head_cross_entropy, &lm_head_cross_entropy_split, &lm_head_logits,
                                  &lm_head_cross_entropy_bf16, &lm_head_cross_entropy_split_bf16,
                                  &lm_head_softcap};

}  // namespace frugal::kernels::cpu
