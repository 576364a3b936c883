// Fused causal self-attention on CPU, flash-attention style (AVX2/FMA + OpenMP).
// Forward: per (batch, head, query tile), stream the key tiles with an online softmax; only O(T)
// per-row statistics (lse) leave the kernel. Backward: per (batch, head), key tiles outside and
// query tiles inside; scores are recomputed from q, k and lse, dK/dV/dQ accumulate straight into
// dqkv (each (batch, head) owns its columns). Every product is one register-blocked micro-kernel
// C (+)= A·B that broadcasts elements of A (any row/inner strides, so transposed operands cost
// nothing) and FMAs contiguous rows of B. See docs/attention.md.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
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
  const __m256i j =
      _mm256_add_epi32(_mm256_set1_epi32(j0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid), j));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Backward P row in place over S: s_j = exp(s_j·scale - lse) for j < n_valid, 0 up to n_pad.
// Entries at or after round_up8(n_valid) are not read (a skipped block may leave them unwritten).
inline void probability_row(float* s, int n_pad, int n_valid, float scale, float lse) {
  const __m256 vs = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(-lse);
  int j = 0;
  for (; j < n_valid; j += 8) {
    const __m256 p = exp8(_mm256_fmadd_ps(_mm256_loadu_ps(s + j), vs, vshift));
    _mm256_storeu_ps(s + j, _mm256_and_ps(p, lanes_below(j, n_valid)));
  }
  std::fill(s + j, s + n_pad, 0.0f);
}

// Which index of a tile product runs over queries and which over keys, so that the all-masked
// corner of a diagonal tile (key j > query i + off, off = q0 - k0) is skipped in whole
// micro-kernel blocks. Off-diagonal tiles (off >= kTile) skip nothing.
enum class Causal {
  QueryRowsKeyCols,   // C (queries x keys): S = Q·Kᵀ, dP = dO·Vᵀ (skipped blocks left unwritten)
  KeyRowsQueryCols,   // C (keys x queries): Sᵀ = K·Qᵀ (skipped blocks left unwritten)
  QueryRowsKeyInner,  // rows queries, inner dim keys: O += P·V, dQ += dS·K
  KeyRowsQueryInner,  // rows keys, inner dim queries: dV += Pᵀ·dO, dK += dSᵀ·Q
};

// A read-only matrix operand whose element (row r, inner index k) is data[r·row_stride +
// k·k_stride]: row-major, or a transposed view of a row-major buffer at no cost.
struct Operand {
  const float* data;
  size_t row_stride, k_stride;
};

// C (MR x 8·NV) = or += A (MR x K) · B (K x 8·NV); C and B row-major. MR <= 6,
// NV <= 2. The accumulators are named scalars, not an array: GCC keeps an array of vectors in
// memory across the k loop, which halves the FMA rate.
template <int MR, int NV>
inline void micro_kernel(float* C, int ldc, const float* A, size_t a_rs, size_t a_ks,
                         const float* B, int ldb, int K, bool accumulate) {
  static_assert(MR >= 1 && MR <= 6 && (NV == 1 || NV == 2));
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z,
         c41 = z, c50 = z, c51 = z;
  for (int k = 0; k < K; ++k) {
    const float* b = B + static_cast<size_t>(k) * ldb;
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = NV == 2 ? _mm256_loadu_ps(b + 8) : z;
    auto row = [&](int r, __m256& x0, __m256& x1) {
      const __m256 a = _mm256_broadcast_ss(A + r * a_rs + k * a_ks);
      x0 = _mm256_fmadd_ps(a, b0, x0);
      if constexpr (NV == 2) x1 = _mm256_fmadd_ps(a, b1, x1);
    };
    row(0, c00, c01);
    if constexpr (MR > 1) row(1, c10, c11);
    if constexpr (MR > 2) row(2, c20, c21);
    if constexpr (MR > 3) row(3, c30, c31);
    if constexpr (MR > 4) row(4, c40, c41);
    if constexpr (MR > 5) row(5, c50, c51);
  }
  auto store = [&](int r, __m256 x0, __m256 x1) {
    float* c = C + r * ldc;
    if (accumulate) x0 = _mm256_add_ps(x0, _mm256_loadu_ps(c));
    _mm256_storeu_ps(c, x0);
    if constexpr (NV == 2) {
      if (accumulate) x1 = _mm256_add_ps(x1, _mm256_loadu_ps(c + 8));
      _mm256_storeu_ps(c + 8, x1);
    }
  };
  store(0, c00, c01);
  if constexpr (MR > 1) store(1, c10, c11);
  if constexpr (MR > 2) store(2, c20, c21);
  if constexpr (MR > 3) store(3, c30, c31);
  if constexpr (MR > 4) store(4, c40, c41);
  if constexpr (MR > 5) store(5, c50, c51);
}

template <int NV>
void micro_kernel_rows(int mr, float* C, int ldc, const float* A, size_t a_rs, size_t a_ks,
                       const float* B, int ldb, int K, bool accumulate) {
  switch (mr) {
    case 6: micro_kernel<6, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
    case 5: micro_kernel<5, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
    case 4: micro_kernel<4, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
    case 3: micro_kernel<3, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
    case 2: micro_kernel<2, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
    default: micro_kernel<1, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate); break;
  }
}

// One column panel (columns n0..n0+8·NV of the product) over all M rows, in blocks of kMR rows.
template <int NV>
void gemm_panel(float* C, int ldc, Operand A, const float* B, int ldb, int M, int K,
                bool accumulate, int n0, Causal causal, int off) {
  static_assert(kMR == 6, "micro_kernel_rows dispatches 1..6 rows");
  for (int m = 0; m < M; m += kMR) {
    const int mr = std::min(kMR, M - m);
    int k_begin = 0, k_end = K;
    if (causal == Causal::QueryRowsKeyCols && n0 > m + mr - 1 + off) continue;
    if (causal == Causal::KeyRowsQueryCols && m > n0 + 8 * NV - 1 + off) continue;
    if (causal == Causal::QueryRowsKeyInner) k_end = std::clamp(m + mr + off, 0, K);
    if (causal == Causal::KeyRowsQueryInner) k_begin = std::clamp(m - off, 0, K);
    // Operand fields go as scalars: a struct argument costs a store-forwarding stall per call.
    micro_kernel_rows<NV>(mr, C + m * ldc, ldc, A.data + m * A.row_stride + k_begin * A.k_stride,
                          A.row_stride, A.k_stride, B + static_cast<size_t>(k_begin) * ldb, ldb,
                          std::max(0, k_end - k_begin), accumulate);
  }
}

// C (M x N) = or += A (M x K) · B (K x N), N a multiple of 8, C and B row-major; a tile product
// with its causal structure (off = q0 - k0 of the tile pair).
void gemm_tile(float* C, int ldc, Operand A, const float* B, int ldb, int M, int N, int K,
               bool accumulate, Causal causal, int off) {
  int n = 0;
  for (; n + 16 <= N; n += 16)
    gemm_panel<2>(C + n, ldc, A, B + n, ldb, M, K, accumulate, n, causal, off);
  if (n < N) gemm_panel<1>(C + n, ldc, A, B + n, ldb, M, K, accumulate, n, causal, off);
}

// dst[c][r] = src[r][c] for an 8x8 block (leading dimensions ld_dst, ld_src).
inline void transpose8x8(float* dst, int ld_dst, const float* src, size_t ld_src) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      r[i + h] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + h + 2] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // r[0..3] now hold columns 0, 2, 1, 3 of rows 0-3 (low lanes) and columns 4, 6, 5, 7 (high
  // lanes); r[4..7] the same for rows 4-7. Joining lanes gives the eight output rows.
  const int order[4] = {0, 2, 1, 3};
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ld_dst, _mm256_permute2f128_ps(r[order[c]], r[4 + order[c]], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ld_dst,
                     _mm256_permute2f128_ps(r[order[c]], r[4 + order[c]], 0x31));
  }
}

// dst (cols x ld_dst) = srcᵀ for src (rows x cols, leading dimension ld_src), cols a multiple of
// 8; dst columns rows..round_up8(rows) are zeroed so the padded tile is safe to multiply.
void transpose_tile(float* dst, int ld_dst, const float* src, size_t ld_src, int rows, int cols) {
  const int full = rows & ~7;
  for (int r = 0; r < full; r += 8)
    for (int c = 0; c < cols; c += 8)
      transpose8x8(dst + c * ld_dst + r, ld_dst, src + r * ld_src + c, ld_src);
  for (int c = 0; c < cols; ++c) {
    float* d = dst + c * ld_dst;
    for (int r = full; r < rows; ++r) d[r] = src[r * ld_src + c];
    for (int r = rows; r < round_up8(rows); ++r) d[r] = 0.0f;
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

// Per-thread scratch for the forward of one query tile.
struct ForwardScratch {
  std::vector<float> qt, st, o, m, l, alpha;
  explicit ForwardScratch(int HS)
      : qt(HS * kTile), st(kTile * kTile), o(kTile * HS), m(kTile), l(kTile), alpha(kTile) {}
};

// The running max used as the softmax shift only moves when the true max exceeds it by more than
// this (so P <= e^8 before normalisation): most key tiles then leave it alone and the partial
// outputs need no rescaling. Exact in exact arithmetic; lse = shift + log(sum) either way.
constexpr float kShiftSlack = 8.0f;

// Online-softmax update for query lanes c..c+7 from the score tile Sᵀ (keys x queries, nk rows):
// new shift m, P = exp(S·scale - m) in place (masked lanes 0), running sum l rescaled; alpha (8)
// receives the factor by which these queries' partial outputs must be rescaled.
// Valid (key j, query i): j <= i + off (causal) and i < nq; other lanes may hold garbage.
// kMasked = false when every lane is valid (the block lies below the diagonal, inside the tile).
template <bool kMasked>
void softmax_update(float* st, int nk, int c, int nq, int off, float scale, float* m, float* l,
                    float* alpha) {
  const __m256i lane =
      _mm256_add_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i in_tile = _mm256_cmpgt_epi32(_mm256_set1_epi32(nq), lane);
  const __m256i last_key = _mm256_add_epi32(lane, _mm256_set1_epi32(off));  // i + off
  auto valid = [&](int j) {
    return _mm256_castsi256_ps(
        _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(j), last_key), in_tile));
  };
  // Keys past the last one any of these 8 queries sees get P = 0 without exp.
  const int j_end = kMasked ? std::clamp(c + 8 + off, 0, nk) : nk;
  const __m256 vs = _mm256_set1_ps(scale), m_old = _mm256_loadu_ps(m + c);
  __m256 m_max = m_old;
  for (int j = 0; j < j_end; ++j) {
    const __m256 sj = _mm256_mul_ps(_mm256_loadu_ps(st + j * kTile + c), vs);
    m_max = kMasked ? _mm256_blendv_ps(m_max, _mm256_max_ps(m_max, sj), valid(j))
                    : _mm256_max_ps(m_max, sj);
  }
  const __m256 moved =
      _mm256_cmp_ps(m_max, _mm256_add_ps(m_old, _mm256_set1_ps(kShiftSlack)), _CMP_GT_OQ);
  const __m256 m_new = _mm256_blendv_ps(m_old, m_max, moved);
  const __m256 neg_m = _mm256_sub_ps(_mm256_setzero_ps(), m_new);
  __m256 sum = _mm256_setzero_ps();
  for (int j = 0; j < j_end; ++j) {
    float* sj = st + j * kTile + c;
    __m256 p = exp8(_mm256_fmadd_ps(_mm256_loadu_ps(sj), vs, neg_m));
    if constexpr (kMasked) p = _mm256_and_ps(p, valid(j));
    _mm256_storeu_ps(sj, p);
    sum = _mm256_add_ps(sum, p);
  }
  for (int j = j_end; j < nk; ++j) _mm256_storeu_ps(st + j * kTile + c, _mm256_setzero_ps());
  const __m256 a = exp8(_mm256_add_ps(m_old, neg_m));  // exactly 1 where the shift stayed
  _mm256_storeu_ps(alpha + c, a);
  _mm256_storeu_ps(l + c, _mm256_fmadd_ps(_mm256_loadu_ps(l + c), a, sum));
  _mm256_storeu_ps(m + c, m_new);
}

// One query tile of one head: out rows q0..q0+nq-1 and their lse.
void forward_query_tile(float* out, float* lse, const float* qkv, const Dims& d, int b, int h,
                        int qt, ForwardScratch& w) {
  const int C3 = 3 * d.C, HS = d.HS, q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
  const int nq_pad = round_up8(nq);
  transpose_tile(w.qt.data(), kTile, qkv + d.at(b, q0, C3, h), C3, nq, HS);  // Qᵀ (HS x queries)
  std::fill(w.o.begin(), w.o.end(), 0.0f);
  // A finite "minus infinity" keeps every rescale factor exp(m_old - m_new) NaN-free.
  std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<float>::max());
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  for (int kt = 0; kt <= qt; ++kt) {
    if (!tile_active(qt, kt)) continue;
    const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0), off = q0 - k0;
    const float* K = qkv + d.at(b, k0, C3, h) + d.C;
    const float* V = K + d.C;
    gemm_tile(w.st.data(), kTile, Operand{K, size_t(C3), 1}, w.qt.data(), kTile, nk, nq_pad, HS,
              false, Causal::KeyRowsQueryCols, off);  // Sᵀ = K·Qᵀ
    for (int c = 0; c < nq_pad; c += 8) {
      const bool masked = c + 8 > nq || nk - 1 > c + off;  // padding lanes or above the diagonal
      (masked ? softmax_update<true> : softmax_update<false>)(
          w.st.data(), nk, c, nq, off, d.scale, w.m.data(), w.l.data(), w.alpha.data());
    }
    for (int i = 0; i < nq; ++i) {
      if (w.alpha[i] == 1.0f) continue;
      float* orow = w.o.data() + i * HS;
      const __m256 va = _mm256_set1_ps(w.alpha[i]);
      for (int c = 0; c < HS; c += 8)
        _mm256_storeu_ps(orow + c, _mm256_mul_ps(va, _mm256_loadu_ps(orow + c)));
    }
    gemm_tile(w.o.data(), HS, Operand{w.st.data(), 1, kTile}, V, C3, nq, HS, nk, true,
              Causal::QueryRowsKeyInner, off);  // O += P·V, P read through Pᵀ
  }
  for (int i = 0; i < nq; ++i) {
    float* dst = out + d.at(b, q0 + i, d.C, h);
    const __m256 inv = _mm256_set1_ps(1.0f / w.l[i]);
    for (int c = 0; c < HS; c += 8)
      _mm256_storeu_ps(dst + c, _mm256_mul_ps(inv, _mm256_loadu_ps(w.o.data() + i * HS + c)));
    lse[(static_cast<size_t>(b) * d.NH + h) * d.T + q0 + i] = w.m[i] + std::log(w.l[i]);
  }
}

// Per-thread scratch for the backward of one (batch, head): tile buffers and D (T).
struct BackwardScratch {
  std::vector<float> kt, vt, p, ds, D;
  BackwardScratch(int HS, int T)
      : kt(HS * kTile), vt(HS * kTile), p(kTile * kTile), ds(kTile * kTile), D(T) {}
};

// dS row in place over dP: dS_j = P_j · (dP_j - D_i) · scale for j < n_valid, 0 up to n_pad.
inline void ds_row(float* ds, const float* p, int n_pad, int n_valid, float D_i, float scale) {
  const __m256 vd = _mm256_set1_ps(D_i), vs = _mm256_set1_ps(scale);
  int j = 0;
  for (; j < n_valid; j += 8) {
    const __m256 pj = _mm256_mul_ps(_mm256_loadu_ps(p + j), vs);  // 0 past n_valid
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(pj, _mm256_sub_ps(_mm256_loadu_ps(ds + j), vd)));
  }
  std::fill(ds + j, ds + n_pad, 0.0f);
}

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
    float* dK = dqkv + d.at(b, k0, C3, h) + d.C;  // dK, dV of this key tile: written by the
    float* dV = dK + d.C;                         // first active query tile, then accumulated
    transpose_tile(w.kt.data(), kTile, K, C3, nk, HS);
    transpose_tile(w.vt.data(), kTile, V, C3, nk, HS);
    bool first = true;
    for (int qt = kt; qt < d.n_tiles; ++qt) {
      if (!tile_active(qt, kt)) continue;
      const int q0 = qt * kTile, nq = std::min(kTile, d.T - q0), off = q0 - k0;
      const float* Q = qkv + d.at(b, q0, C3, h);
      const float* dO = dout + d.at(b, q0, d.C, h);
      float* dQ = dqkv + d.at(b, q0, C3, h);
      float *p = w.p.data(), *ds = w.ds.data();
      gemm_tile(p, kTile, Operand{Q, size_t(C3), 1}, w.kt.data(), kTile, nq, nk_pad, HS, false,
                Causal::QueryRowsKeyCols, off);  // S = Q·Kᵀ
      gemm_tile(ds, kTile, Operand{dO, size_t(d.C), 1}, w.vt.data(), kTile, nq, nk_pad, HS, false,
                Causal::QueryRowsKeyCols, off);  // dP = dO·Vᵀ
      for (int i = 0; i < nq; ++i) {  // P = exp(S·scale - lse); dS = P ∘ (dP - D)·scale
        const int n_valid = causal_valid(q0 + i, k0, nk);
        probability_row(p + i * kTile, nk_pad, n_valid, d.scale, lse_bh[q0 + i]);
        ds_row(ds + i * kTile, p + i * kTile, nk_pad, n_valid, w.D[q0 + i], d.scale);
      }
      const Operand p_t{p, 1, kTile}, ds_t{ds, 1, kTile};  // Pᵀ, dSᵀ as views
      gemm_tile(dV, C3, p_t, dO, d.C, nk, HS, nq, !first, Causal::KeyRowsQueryInner,
                off);  // dV += Pᵀ·dO
      gemm_tile(dK, C3, ds_t, Q, C3, nk, HS, nq, !first, Causal::KeyRowsQueryInner,
                off);  // dK += dSᵀ·Q
      gemm_tile(dQ, C3, Operand{ds, kTile, 1}, K, C3, nq, HS, nk, true, Causal::QueryRowsKeyInner,
                off);  // dQ += dS·K
      first = false;
    }
    if (first)  // no active query tile: these keys get no gradient
      for (int j = 0; j < nk; ++j) {
        std::fill_n(dK + static_cast<size_t>(j) * C3, HS, 0.0f);
        std::fill_n(dV + static_cast<size_t>(j) * C3, HS, 0.0f);
      }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  FRUGAL_PROFILE("attention fwd");
  const Dims d(B, T, C, NH);
  const int heads = B * NH, items = heads * d.n_tiles;
#pragma omp parallel
  {
    ForwardScratch w(d.HS);
    // Longest query tiles (most key tiles) first; each item writes only its own rows.
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < items; ++item) {
      const int qt = d.n_tiles - 1 - item / heads, bh = item % heads;
      forward_query_tile(out, lse, qkv, d, bh / NH, bh % NH, qt, w);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  FRUGAL_PROFILE("attention bwd");
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
