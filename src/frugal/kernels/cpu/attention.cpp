// Fused causal self-attention on CPU, flash-attention style (AVX2/FMA + OpenMP).
// Forward: per (batch, head, query tile), stream the key tiles with an online softmax; only O(T)
// per-row statistics (lse) leave the kernel. Backward: per (batch, head), key tiles outside and
// query tiles inside; scores are recomputed from q, k and lse, dK/dV accumulate in a per-thread
// tile buffer, dQ accumulates straight into dqkv. Every product is one register-blocked
// micro-kernel C (+)= A·B (broadcast a, FMA contiguous b rows). See docs/attention.md.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {
namespace {

constexpr int kTile = 64;  // queries per query tile = keys per key tile
constexpr int kMR = 6;     // micro-kernel rows (6 x 16 floats = 12 accumulators)

// Which (query tile, key tile) pairs hold any unmasked score. Only causal today; a block-sparse
// pattern (local window + strided columns for Mixed Sparsity Training) narrows this predicate,
// and the loops below then skip whole tiles. Per-score masking happens only on diagonal tiles.
inline bool tile_active(int q_tile, int k_tile) { return k_tile <= q_tile; }

// Number of keys k0..k0+nk-1 that query q may attend to (causal: keys up to q itself).
inline int causal_valid(int q, int k0, int nk) { return std::clamp(q - k0 + 1, 0, nk); }

inline int round_up8(int n) { return (n + 7) & ~7; }

// exp(x) on 8 floats: x = n·ln2 + r with |r| <= ln2/2, degree-7 Taylor polynomial in r (relative
// error ~5e-9 before float rounding), times 2^n built in the exponent bits. Inputs below -87 give
// ~1e-38 instead of 0; callers zero masked lanes themselves.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 = hi + lo
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Lanes j0..j0+7 that are < n_valid: all-ones, else zero.
inline __m256 lanes_below(int j0, int n_valid) {
  const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid), j));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// Largest of s[0..n_valid) (n_valid >= 1); s is readable up to round_up8(n_valid).
inline float row_max(const float* s, int n_valid) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  for (int j = 0; j < n_valid; j += 8)
    m = _mm256_max_ps(m, _mm256_blendv_ps(m, _mm256_loadu_ps(s + j), lanes_below(j, n_valid)));
  return hmax(m);
}

// In place over s[0..n_pad): s_j = exp(s_j·scale - shift) for j < n_valid, 0 after. Returns Σ s_j.
inline float exp_row(float* s, int n_pad, int n_valid, float scale, float shift) {
  const __m256 vs = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(-shift);
  __m256 sum = _mm256_setzero_ps();
  for (int j = 0; j < n_pad; j += 8) {
    const __m256 p = _mm256_and_ps(
        exp8(_mm256_fmadd_ps(_mm256_loadu_ps(s + j), vs, vshift)), lanes_below(j, n_valid));
    _mm256_storeu_ps(s + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  return hsum(sum);
}

// C (MR x 8·NV) = or += A (MR x K) · B (K x 8·NV); row-major with leading dimensions.
template <int MR, int NV>
inline void micro_kernel(float* C, int ldc, const float* A, int lda, const float* B, int ldb,
                         int K, bool accumulate) {
  __m256 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm256_loadu_ps(C + r * ldc + 8 * v) : _mm256_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m256 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(B + static_cast<size_t>(k) * ldb + 8 * v);
    for (int r = 0; r < MR; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(C + r * ldc + 8 * v, acc[r][v]);
}

// One column panel (8·NV wide) of C over all M rows, in blocks of kMR rows.
template <int NV>
void gemm_panel(float* C, int ldc, const float* A, int lda, const float* B, int ldb, int M, int K,
                bool accumulate) {
  int m = 0;
  for (; m + kMR <= M; m += kMR)
    micro_kernel<kMR, NV>(C + m * ldc, ldc, A + m * lda, lda, B, ldb, K, accumulate);
  float* c = C + m * ldc;
  const float* a = A + m * lda;
  switch (M - m) {
    case 5: micro_kernel<5, NV>(c, ldc, a, lda, B, ldb, K, accumulate); break;
    case 4: micro_kernel<4, NV>(c, ldc, a, lda, B, ldb, K, accumulate); break;
    case 3: micro_kernel<3, NV>(c, ldc, a, lda, B, ldb, K, accumulate); break;
    case 2: micro_kernel<2, NV>(c, ldc, a, lda, B, ldb, K, accumulate); break;
    case 1: micro_kernel<1, NV>(c, ldc, a, lda, B, ldb, K, accumulate); break;
    default: break;
  }
}

// C (M x N) = or += A (M x K) · B (K x N), N a multiple of 8, all row-major (tile-sized products).
void gemm_tile(float* C, int ldc, const float* A, int lda, const float* B, int ldb, int M, int N,
               int K, bool accumulate) {
  int n = 0;
  for (; n + 16 <= N; n += 16) gemm_panel<2>(C + n, ldc, A, lda, B + n, ldb, M, K, accumulate);
  if (n < N) gemm_panel<1>(C + n, ldc, A, lda, B + n, ldb, M, K, accumulate);
}

// dst (cols x ld_dst) = srcᵀ for src (rows x cols, leading dimension ld_src); dst columns
// rows..round_up8(rows) are zeroed so the padded tile is safe to multiply.
void transpose_tile(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  const int rows_pad = round_up8(rows);
  for (int c = 0; c < cols; ++c) {
    float* d = dst + c * ld_dst;
    for (int r = 0; r < rows; ++r) d[r] = src[static_cast<size_t>(r) * ld_src + c];
    for (int r = rows; r < rows_pad; ++r) d[r] = 0.0f;
  }
}

// Shape bookkeeping shared by forward and backward.
struct Dims {
  int B, T, C, NH, HS;
  int n_tiles;
  float scale;
  Dims(int B_, int T_, int C_, int NH_) : B(B_), T(T_), C(C_), NH(NH_) {
    FRUGAL_CHECK(B > 0 && T > 0 && NH > 0 && C % NH == 0,
                 "attention: need B, T, NH > 0 and C divisible by NH (got B={} T={} C={} NH={}); "
                 "fix the model config",
                 B, T, C, NH);
    HS = C / NH;
    FRUGAL_CHECK(HS % 8 == 0 && HS <= 256,
                 "attention: head size C/NH = {} must be a multiple of 8 and at most 256; choose "
                 "n_head so that n_embd/n_head fits",
                 HS);
    n_tiles = (T + kTile - 1) / kTile;
    scale = 1.0f / std::sqrt(static_cast<float>(HS));
  }
  // Offset of row t of batch b, head h, in a (B,T,width) tensor.
  size_t at(int b, int t, int width, int h) const {
    return (static_cast<size_t>(b) * T + t) * width + static_cast<size_t>(h) * HS;
  }
};

// One query tile of one head: out rows q0..q0+nq-1 and their lse.
void forward_query_tile(float* out, float* lse, const float* qkv, const Dims& d, int b, int h,
                        int qt, float* s, float* kt_buf, float* o, float* m, float* l) {
  const int C3 = 3 * d.C, q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
  const float* Q = qkv + d.at(b, q0, C3, h);
  std::fill(o, o + nq * d.HS, 0.0f);
  std::fill(m, m + nq, -INFINITY);
  std::fill(l, l + nq, 0.0f);
  for (int kt = 0; kt <= qt; ++kt) {
    if (!tile_active(qt, kt)) continue;
    const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0), nk_pad = round_up8(nk);
    const float* K = qkv + d.at(b, k0, C3, h) + d.C;
    const float* V = K + d.C;
    transpose_tile(kt_buf, kTile, K, C3, nk, d.HS);
    gemm_tile(s, kTile, Q, C3, kt_buf, kTile, nq, nk_pad, d.HS, false);  // S = Q·Kᵀ
    for (int i = 0; i < nq; ++i) {
      const int n_valid = causal_valid(q0 + i, k0, nk);
      float* srow = s + i * kTile;
      if (n_valid == 0) {  // row fully masked in this tile: contributes nothing
        std::fill_n(srow, nk_pad, 0.0f);
        continue;
      }
      const float m_new = std::max(m[i], row_max(srow, n_valid) * d.scale);
      const float alpha = std::exp(m[i] - m_new);  // 0 on the first tile (m = -inf)
      l[i] = l[i] * alpha + exp_row(srow, nk_pad, n_valid, d.scale, m_new);
      m[i] = m_new;
      float* orow = o + i * d.HS;
      const __m256 va = _mm256_set1_ps(alpha);
      for (int c = 0; c < d.HS; c += 8)
        _mm256_storeu_ps(orow + c, _mm256_mul_ps(va, _mm256_loadu_ps(orow + c)));
    }
    gemm_tile(o, d.HS, s, kTile, V, C3, nq, d.HS, nk, true);  // O += P·V
  }
  for (int i = 0; i < nq; ++i) {
    float* dst = out + d.at(b, q0 + i, d.C, h);
    const __m256 inv = _mm256_set1_ps(1.0f / l[i]);
    for (int c = 0; c < d.HS; c += 8)
      _mm256_storeu_ps(dst + c, _mm256_mul_ps(inv, _mm256_loadu_ps(o + i * d.HS + c)));
    lse[(static_cast<size_t>(b) * d.NH + h) * d.T + q0 + i] = m[i] + std::log(l[i]);
  }
}

// Per-thread scratch for the backward of one (batch, head): tile buffers and D (T).
struct BackwardScratch {
  std::vector<float> kt, vt, p, pt, ds, dst, dk, dv, D;
  BackwardScratch(int HS, int T)
      : kt(HS * kTile), vt(HS * kTile), p(kTile * kTile), pt(kTile * kTile), ds(kTile * kTile),
        dst(kTile * kTile), dk(kTile * HS), dv(kTile * HS), D(T) {}
};

// dqkv for one (batch, head): this call owns its dq, dk and dv columns entirely.
void backward_head(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, const Dims& d, int b, int h, BackwardScratch& w) {
  const int C3 = 3 * d.C, HS = d.HS;
  const float* lse_bh = lse + (static_cast<size_t>(b) * d.NH + h) * d.T;
  for (int t = 0; t < d.T; ++t) {  // D_t = rowsum(dO_t ∘ O_t); zero dq
    const float* g = dout + d.at(b, t, d.C, h);
    const float* o = out + d.at(b, t, d.C, h);
    __m256 acc = _mm256_setzero_ps();
    for (int c = 0; c < HS; c += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(g + c), _mm256_loadu_ps(o + c), acc);
    w.D[t] = hsum(acc);
    std::fill_n(dqkv + d.at(b, t, C3, h), HS, 0.0f);
  }
  for (int kt = 0; kt < d.n_tiles; ++kt) {
    const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0), nk_pad = round_up8(nk);
    const float* K = qkv + d.at(b, k0, C3, h) + d.C;
    const float* V = K + d.C;
    transpose_tile(w.kt.data(), kTile, K, C3, nk, HS);
    transpose_tile(w.vt.data(), kTile, V, C3, nk, HS);
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int qt = kt; qt < d.n_tiles; ++qt) {
      if (!tile_active(qt, kt)) continue;
      const int q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
      const float* Q = qkv + d.at(b, q0, C3, h);
      const float* dO = dout + d.at(b, q0, d.C, h);
      float* dQ = dqkv + d.at(b, q0, C3, h);
      float *p = w.p.data(), *ds = w.ds.data();
      gemm_tile(p, kTile, Q, C3, w.kt.data(), kTile, nq, nk_pad, HS, false);    // S = Q·Kᵀ
      gemm_tile(ds, kTile, dO, d.C, w.vt.data(), kTile, nq, nk_pad, HS, false);  // dP = dO·Vᵀ
      for (int i = 0; i < nq; ++i) {  // P = exp(S·scale - lse); dS = P ∘ (dP - D)·scale
        float* prow = p + i * kTile;
        float* dsrow = ds + i * kTile;
        exp_row(prow, nk_pad, causal_valid(q0 + i, k0, nk), d.scale, lse_bh[q0 + i]);
        const __m256 Di = _mm256_set1_ps(w.D[q0 + i]), vs = _mm256_set1_ps(d.scale);
        for (int j = 0; j < nk_pad; j += 8) {
          const __m256 pj = _mm256_mul_ps(_mm256_loadu_ps(prow + j), vs);
          _mm256_storeu_ps(dsrow + j, _mm256_mul_ps(pj, _mm256_sub_ps(_mm256_loadu_ps(dsrow + j), Di)));
        }
      }
      transpose_tile(w.pt.data(), kTile, p, kTile, nq, nk);
      transpose_tile(w.dst.data(), kTile, ds, kTile, nq, nk);
      gemm_tile(w.dv.data(), HS, w.pt.data(), kTile, dO, d.C, nk, HS, nq, true);  // dV += Pᵀ·dO
      gemm_tile(w.dk.data(), HS, w.dst.data(), kTile, Q, C3, nk, HS, nq, true);   // dK += dSᵀ·Q
      gemm_tile(dQ, C3, ds, kTile, K, C3, nq, HS, nk, true);                      // dQ += dS·K
    }
    for (int j = 0; j < nk; ++j) {
      float* row = dqkv + d.at(b, k0 + j, C3, h);
      std::copy_n(w.dk.data() + j * HS, HS, row + d.C);
      std::copy_n(w.dv.data() + j * HS, HS, row + 2 * d.C);
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const Dims d(B, T, C, NH);
  const int heads = B * NH, items = heads * d.n_tiles;
#pragma omp parallel
  {
    std::vector<float> s(kTile * kTile), kt_buf(d.HS * kTile), o(kTile * d.HS), m(kTile), l(kTile);
    // Longest query tiles (most key tiles) first; each item writes only its own rows.
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < items; ++item) {
      const int qt = d.n_tiles - 1 - item / heads, bh = item % heads;
      forward_query_tile(out, lse, qkv, d, bh / NH, bh % NH, qt, s.data(), kt_buf.data(),
                         o.data(), m.data(), l.data());
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  const Dims d(B, T, C, NH);
#pragma omp parallel
  {
    BackwardScratch w(d.HS, T);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh)
      backward_head(dqkv, dout, qkv, out, lse, d, bh / NH, bh % NH, w);
  }
}

}  // namespace frugal::kernels
