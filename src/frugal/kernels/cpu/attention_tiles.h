// Internal to the fused attention (CPU, flash-attention style, OpenMP): the tile loops, written
// once over a vector-traits type Isa and instantiated per instruction set (attention_avx2.cpp,
// attention_avx512.cpp; attention.cpp dispatches). The AttentionPattern decides per tile: empty
// tiles are never computed, full tiles take the unmasked path, partial tiles mask per score with
// the pattern's bit rows (TileMask, computed once per call for all tiles: TileMasks). A causal
// pattern meets the tile pairs on and below the diagonal only, trimmed to its band; Bidirectional
// meets every pair, all full.
// Forward: per (batch, head, query tile), stream the key tiles with an online softmax; only O(T)
// per-row statistics (lse) leave the kernel. Backward: per (batch, head), key tiles outside and
// query tiles inside; scores are recomputed from q, k and lse, dK/dV/dQ accumulate straight into
// dqkv (each (batch, head) owns its columns). Every product is one register-blocked micro-kernel
// C (+)= A·B that broadcasts elements of A (any row/inner strides, so transposed operands cost
// nothing) and FMAs contiguous rows of B. The forward on bf16 operands (forward_bf16) runs the
// same tile loop with its two products on bf16 pairs (two inner indices per 32-bit word, summed
// by vdpbf16ps or by two FMAs on the widened halves): each head's q, k, v rounded in place and
// packed once (q and k rows, v as pairs of rows), P rounded to pairs of keys per tile. The
// backward on bf16 operands (backward_bf16) likewise runs the backward's loop (backward_tiles)
// with its five products on pairs: dO rounded, each head's q, k, v, dO packed once as rows and
// q, k, dO as pairs of rows, P and dS rounded per tile pair. Strided{w, s} runs as its window Local(w), then per
// residue class mod s a causal pass over the strided pairs beyond the window (the class's rows
// packed into a contiguous sequence), merged through the lse. See docs/attention.md.
//
// Isa provides: reg, mask, kLanes, kMR (micro-kernel rows), Narrow (traits for an 8-column
// remainder), zero(), set1(x), load(p), store(p, v), bcast(p), fma(a, b, c) = a·b + c, add, sub,
// mul, max, exp, gt(a, b) (lane mask a > b), from_bits(bits) (lane i set iff bit i of bits),
// select(m, a, b) (m ? a : b) and keep(m, x) (m ? x : 0); for bf16 pairs kMRPairs, pairs,
// load_pairs(p), bcast_pair(p), dot_pair(a, b, acc), and the rounding ireg, round_high(v),
// pair(lo, hi), as_reg, store_words, store_bf16. The O(T·HS) loops (transposes, rescaling, the
// output write, D) stay 8-wide AVX2 in every instantiation.
//
// Everything here has internal linkage (unnamed namespace): the AVX-512 translation unit compiles
// this header under `#pragma GCC target("avx512f")`, and no inline function of it may be shared
// with (and picked by the linker for) the AVX2 one.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/cpu/simd_avx2.h"
#include "frugal/kernels/cpu/simd_math.h"
#include "frugal/kernels/cpu/elementwise.h"

namespace frugal::kernels::attention_detail {
namespace {

constexpr int kTile = 64;  // queries per query tile = keys per key tile
static_assert(kTile == 64, "ops.h attention_bf16_operands counts 64-row query tiles");

using Tile = AttentionPattern::Tile;

inline int round_up8(int n) { return (n + 7) & ~7; }

// The allowed pairs of one non-empty tile as bit rows: row[r] (r < n) has bit c set iff pair
// (r, c) is allowed (c < width <= kTile); `all` is their AND, the columns allowed in every row.
// Rows are keys with query bits (forward, Sᵀ layout) or queries with key bits (backward).
struct TileMask {
  uint64_t row[kTile];
  uint64_t all;
};

// Fills m for a tile of kind Full or Partial; bits(r) computes row r of a partial tile.
template <class Bits>
void fill_mask(TileMask& m, Tile kind, int n, int width, Bits bits) {
  const uint64_t full = width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  m.all = full;
  for (int r = 0; r < n; ++r) {
    m.row[r] = kind == Tile::Full ? full : bits(r);
    m.all &= m.row[r];
  }
}

// AVX2/FMA traits: 8 lanes, masks are all-ones/zero lanes, a 6 x 16 micro-kernel (12 ymm
// accumulators).
struct Avx2 : cpu::Avx2Ops {
  using mask = __m256;
  using Narrow = Avx2;
  static constexpr int kMR = 6;
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg exp(reg x) { return cpu::exp256(x); }
  static mask gt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static mask from_bits(uint64_t bits) {
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i b = _mm256_set1_epi32(static_cast<int>(bits & 0xff));
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b, lane), lane));
  }
  static reg select(mask m, reg a, reg b) { return _mm256_blendv_ps(b, a, m); }
  static reg keep(mask m, reg x) { return _mm256_and_ps(x, m); }
  // bf16 pairs widened to fp32 (the even and the odd inner index of each lane) and multiplied by
  // two FMAs, the odd index first as vdpbf16ps orders them (each product is exact in fp32).
  // 4 x 16 blocks: 8 accumulators and 6 operand registers of the 16.
  static constexpr int kMRPairs = 4;
  struct pairs {
    reg even, odd;
  };
  static pairs widen(__m256i w) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static pairs load_pairs(const uint32_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static pairs bcast_pair(const uint32_t* p) { return widen(_mm256_set1_epi32(static_cast<int>(*p))); }
  static reg dot_pair(pairs a, pairs b, reg acc) { return fma(a.even, b.even, fma(a.odd, b.odd, acc)); }
  // v rounded to bf16 (nearest even, NaN quiet: kernels/ref/bf16_ref.h's rounding bit for bit),
  // each result in the high half of its 32-bit lane, the low half zero: the rounded float's bits.
  using ireg = __m256i;
  static ireg round_high(reg v) {
    const __m256i x = _mm256_castps_si256(v), high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), high);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_and_si256(x, high), _mm256_set1_epi32(0x400000));
    return _mm256_blendv_epi8(r, quiet, nan);
  }
  // Pair words of two rounded vectors (round_high's): lo's value in the low half, hi's in the high.
  static ireg pair(ireg lo, ireg hi) { return _mm256_or_si256(_mm256_srli_epi32(lo, 16), hi); }
  static reg as_reg(ireg x) { return _mm256_castsi256_ps(x); }
  static void store_words(uint32_t* p, ireg w) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), w); }
  // The kLanes bf16 of a rounded vector, in order (kLanes / 2 words).
  static void store_bf16(uint32_t* p, ireg r) {
    const __m256i low = _mm256_srli_epi32(r, 16);  // each lane <= 0xffff: packus keeps it
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)));
  }
};

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// One past the last allowed column of a mask row (0 when none is).
inline int row_end(uint64_t allowed) { return allowed ? 64 - __builtin_clzll(allowed) : 0; }
// The first allowed column of a mask row rounded down to a multiple of `lanes` (0 when none is).
inline int row_begin(uint64_t allowed, int lanes) {
  return allowed ? __builtin_ctzll(allowed) / lanes * lanes : 0;
}

// Backward P row in place over S (a kTile-wide row): s_j = exp(s_j·scale - lse) where bit j of
// `allowed` is set, else 0, up to n_pad (and up to the end of the last vector). Disallowed lanes
// may hold garbage (a skipped block leaves them unwritten); the mask zeroes them, even NaN.
template <class Isa>
void probability_row(float* s, int n_pad, uint64_t allowed, float scale, float lse) {
  const typename Isa::reg vs = Isa::set1(scale), vshift = Isa::set1(-lse);
  const int n_valid = row_end(allowed), j_begin = row_begin(allowed, Isa::kLanes);
  std::fill_n(s, j_begin, 0.0f);
  int j = j_begin;
  for (; j < n_valid; j += Isa::kLanes) {
    const typename Isa::reg p = Isa::exp(Isa::fma(Isa::load(s + j), vs, vshift));
    Isa::store(s + j, Isa::keep(Isa::from_bits(allowed >> j), p));
  }
  for (; j < n_pad; ++j) s[j] = 0.0f;
}

// Where a tile pair lies against the band of pairs a pattern can allow: pair (query i, key j) of
// the tile (tile-local indices) can be allowed only if 0 <= i + off - j <= reach, off = q0 - k0,
// reach = the pattern's max_distance() (a causal pattern; Local also bounds how far back).
// Bidirectional attention has no band: unbounded() puts every pair of a tile (indices < kTile)
// inside it, far from int overflow, so nothing is skipped or trimmed.
struct Band {
  int off, reach;
  static Band unbounded() { return {1 << 28, 1 << 29}; }
};

// Which index of a tile product runs over queries and which over keys, so that micro-kernel
// blocks outside the band (above a diagonal tile's diagonal, or further back than the reach) are
// skipped whole and inner loops trimmed to it. Causal tiles below the diagonal skip nothing.
enum class Causal {
  QueryRowsKeyCols,   // C (queries x keys): S = Q·Kᵀ, dP = dO·Vᵀ (skipped blocks left unwritten)
  KeyRowsQueryCols,   // C (keys x queries): Sᵀ = K·Qᵀ (skipped blocks left unwritten)
  QueryRowsKeyInner,  // rows queries, inner dim keys: O += P·V, dQ += dS·K
  KeyRowsQueryInner,  // rows keys, inner dim queries: dV += Pᵀ·dO, dK += dSᵀ·Q
};

// A read-only matrix operand whose element (row r, inner index k) is data[r·row_stride +
// k·k_stride]: row-major, or a transposed view of a row-major buffer at no cost. E = float: fp32
// elements; E = uint32_t: bf16 pairs, element (r, k) the 32-bit word holding inner indices 2k
// (low half) and 2k + 1 (high half) of row r (the layout vdpbf16ps multiplies).
template <class E>
struct OperandOf {
  const E* data;
  size_t row_stride, k_stride;
};
using Operand = OperandOf<float>;
using PairOperand = OperandOf<uint32_t>;
// Inner indices per element: 1 for fp32, 2 for bf16 pairs.
template <class E>
constexpr int kPerElement = std::is_same_v<E, uint32_t> ? 2 : 1;

// How the micro-kernel loads, broadcasts and multiplies elements E: fp32 values (FMA), or bf16
// pairs (Isa::dot_pair: vdpbf16ps, or two FMAs on the widened halves).
template <class Isa, class E>
struct Elements {
  using reg = typename Isa::reg;
  static reg load(const float* p) { return Isa::load(p); }
  static reg bcast(const float* p) { return Isa::bcast(p); }
  static reg madd(reg a, reg b, reg acc) { return Isa::fma(a, b, acc); }
};
template <class Isa>
struct Elements<Isa, uint32_t> {
  using reg = typename Isa::pairs;
  static reg load(const uint32_t* p) { return Isa::load_pairs(p); }
  static reg bcast(const uint32_t* p) { return Isa::bcast_pair(p); }
  static typename Isa::reg madd(reg a, reg b, typename Isa::reg acc) { return Isa::dot_pair(a, b, acc); }
};

// C (MR x L·NV) = or += A (MR x K) · B (K x L·NV), L = Isa::kLanes; C and B row-major. On bf16
// pairs (E = uint32_t) K counts pairs: B's row k holds inner indices 2k, 2k + 1 of each column.
// The accumulator array is fully unrolled so that it lives in registers across the k loop.
template <class Isa, int MR, int NV, class E>
inline void micro_kernel(float* C, int ldc, const E* A, size_t a_rs, size_t a_ks, const E* B, int ldb,
                         int K, bool accumulate) {
  using El = Elements<Isa, E>;
  constexpr int L = Isa::kLanes;
  typename Isa::reg acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = Isa::zero();
  for (int k = 0; k < K; ++k) {
    const E* b = B + static_cast<size_t>(k) * ldb;
    typename El::reg bk[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bk[v] = El::load(b + v * L);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const typename El::reg a = El::bcast(A + r * a_rs + k * a_ks);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = El::madd(a, bk[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* c = C + r * ldc + v * L;
      Isa::store(c, accumulate ? Isa::add(acc[r][v], Isa::load(c)) : acc[r][v]);
    }
}

// The micro-kernel's rows per block: Isa::kMR on fp32, Isa::kMRPairs on bf16 pairs (whose
// widened operands may need more registers).
template <class Isa, class E>
constexpr int kRowsOf = std::is_same_v<E, uint32_t> ? Isa::kMRPairs : Isa::kMR;

// micro_kernel for mr = 1..MR rows.
template <class Isa, int NV, int MR, class E>
void micro_kernel_rows(int mr, float* C, int ldc, const E* A, size_t a_rs, size_t a_ks,
                       const E* B, int ldb, int K, bool accumulate) {
  if constexpr (MR > 1)
    if (mr < MR)
      return micro_kernel_rows<Isa, NV, MR - 1>(mr, C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate);
  micro_kernel<Isa, MR, NV>(C, ldc, A, a_rs, a_ks, B, ldb, K, accumulate);
}

// One column panel (columns n0..n0+L·NV of the product) over all M rows, in blocks of
// kRowsOf<Isa, E> rows. K and the band's trimming count inner indices; on bf16 pairs an inner
// range is widened to whole pairs (the caller's operands hold zeros, or values multiplied by
// zeros, in the extra index).
template <class Isa, int NV, class E>
void gemm_panel(float* C, int ldc, OperandOf<E> A, const E* B, int ldb, int M, int K,
                bool accumulate, int n0, Causal causal, Band band) {
  constexpr int MR = kRowsOf<Isa, E>, per = kPerElement<E>;
  const int off = band.off, reach = band.reach, n1 = n0 + Isa::kLanes * NV;  // columns [n0, n1)
  for (int m = 0; m < M; m += MR) {
    const int mr = std::min(MR, M - m);
    int k_begin = 0, k_end = K;
    if (causal == Causal::QueryRowsKeyCols && (n0 > m + mr - 1 + off || m + off - (n1 - 1) > reach))
      continue;
    if (causal == Causal::KeyRowsQueryCols && (m > n1 - 1 + off || n0 + off - (m + mr - 1) > reach))
      continue;
    if (causal == Causal::QueryRowsKeyInner) {
      k_begin = std::clamp(m + off - reach, 0, K);
      k_end = std::clamp(m + mr + off, 0, K);
    }
    if (causal == Causal::KeyRowsQueryInner) {
      k_begin = std::clamp(m - off, 0, K);
      k_end = std::clamp(m + mr + reach - off, 0, K);
    }
    k_begin /= per;                     // in elements: the pair holding k_begin
    k_end = (k_end + per - 1) / per;    // one past the pair holding k_end - 1
    // Operand fields go as scalars: a struct argument costs a store-forwarding stall per call.
    micro_kernel_rows<Isa, NV, MR>(mr, C + m * ldc, ldc,
                                   A.data + m * A.row_stride + k_begin * A.k_stride, A.row_stride,
                                   A.k_stride, B + static_cast<size_t>(k_begin) * ldb, ldb,
                                   std::max(0, k_end - k_begin), accumulate);
  }
}

// C (M x N) = or += A (M x K) · B (K x N), N a multiple of 8, C and B row-major (B's rows are
// pairs of inner indices on bf16 pairs, ldb in elements); a tile product with its place against
// the band. Panels of 2 vectors, then one, then 8-column remainders with the narrow traits.
template <class Isa, class E>
void gemm_tile(float* C, int ldc, OperandOf<E> A, const E* B, int ldb, int M, int N, int K,
               bool accumulate, Causal causal, Band band) {
  constexpr int L = Isa::kLanes, L8 = Isa::Narrow::kLanes;
  static_assert(L8 == 8, "the remainder panels are 8 columns wide");
  int n = 0;
  for (; n + 2 * L <= N; n += 2 * L)
    gemm_panel<Isa, 2>(C + n, ldc, A, B + n, ldb, M, K, accumulate, n, causal, band);
  for (; n + L <= N; n += L)
    gemm_panel<Isa, 1>(C + n, ldc, A, B + n, ldb, M, K, accumulate, n, causal, band);
  for (; n < N; n += L8)
    gemm_panel<typename Isa::Narrow, 1>(C + n, ldc, A, B + n, ldb, M, K, accumulate, n, causal,
                                        band);
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
  int reach;  // the pattern's max_distance(), at most T (Band::reach)
  bool causal;  // the pattern is causal: query tile qt meets key tiles kt <= qt only
  float scale;
  Dims(int B_, int T_, int C_, int NH_, const AttentionPattern& pattern)
      : B(B_), T(T_), C(C_), NH(NH_),
        reach(static_cast<int>(std::min<int64_t>(pattern.max_distance(), T))),
        causal(pattern.is_causal()) {
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
  // The key tiles query tile qt may meet: [0, key_tiles_end(qt)); the query tiles key tile kt may
  // meet: [query_tiles_begin(kt), n_tiles).
  int key_tiles_end(int qt) const { return causal ? qt + 1 : n_tiles; }
  int query_tiles_begin(int kt) const { return causal ? kt : 0; }
  // The band of tile pair (query tile at q0, key tile at k0).
  Band band(int q0, int k0) const { return causal ? Band{q0 - k0, reach} : Band::unbounded(); }
  // Offset of row t of batch b, head h, in a (B,T,width) tensor.
  size_t at(int b, int t, int width, int h) const {
    return (static_cast<size_t>(b) * T + t) * width + static_cast<size_t>(h) * HS;
  }
};

// The kind and mask of every tile pair (query tile qt, key tile kt < d.key_tiles_end(qt)) of the
// sequence: they depend on positions only, so they are computed once per call, not per batch row
// and head. Forward masks have key rows (query bits, the Sᵀ layout), backward masks query rows
// (key bits).
struct TileMasks {
  int n_tiles;
  std::vector<Tile> kind;
  std::vector<TileMask> mask;  // meaningful where kind is not Empty
  TileMasks(const AttentionPattern& pattern, const Dims& d, bool key_rows)
      : n_tiles(d.n_tiles), kind(size_t(n_tiles) * n_tiles), mask(kind.size()) {
    for (int qt = 0; qt < d.n_tiles; ++qt)
      for (int kt = 0; kt < d.key_tiles_end(qt); ++kt) {
        const int q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
        const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0);
        const Tile k = kind[at(qt, kt)] = pattern.tile(q0, q0 + nq, k0, k0 + nk);
        if (k == Tile::Empty) continue;
        if (key_rows)
          fill_mask(mask[at(qt, kt)], k, nk, nq,
                    [&](int j) { return pattern.queries_of(k0 + j, q0, nq); });
        else
          fill_mask(mask[at(qt, kt)], k, nq, nk,
                    [&](int i) { return pattern.keys_of(q0 + i, k0, nk); });
      }
  }
  // Index of tile pair (qt, kt), row by row.
  size_t at(int qt, int kt) const { return static_cast<size_t>(qt) * n_tiles + kt; }
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

// Online-softmax update for query lanes c..c+L-1 (L = Isa::kLanes) from the score tile Sᵀ (keys x
// queries, nk rows): new shift m, P = exp(S·scale - m) in place (masked lanes 0), running sum l
// rescaled; alpha (L) receives the factor by which these queries' partial outputs must be
// rescaled. Valid (key j, query i): bit i of mask.row[j] (never outside the band, never
// i >= nq); other lanes may hold garbage. kMasked = false when every lane is valid.
template <class Isa, bool kMasked>
void softmax_update(float* st, int nk, int c, Band band, const TileMask& mask, float scale,
                    float* m, float* l, float* alpha) {
  using reg = typename Isa::reg;
  auto valid = [&](int j) { return Isa::from_bits(mask.row[j] >> c); };
  // Keys outside the band of all these L queries get P = 0 without exp.
  const int j_begin = kMasked ? std::clamp(c + band.off - band.reach, 0, nk) : 0;
  const int j_end = kMasked ? std::clamp(c + Isa::kLanes + band.off, 0, nk) : nk;
  const reg vs = Isa::set1(scale), m_old = Isa::load(m + c);
  reg m_max = m_old;
  for (int j = j_begin; j < j_end; ++j) {
    const reg sj = Isa::mul(Isa::load(st + j * kTile + c), vs);
    m_max = kMasked ? Isa::select(valid(j), Isa::max(m_max, sj), m_max) : Isa::max(m_max, sj);
  }
  const reg m_new =
      Isa::select(Isa::gt(m_max, Isa::add(m_old, Isa::set1(kShiftSlack))), m_max, m_old);
  const reg neg_m = Isa::sub(Isa::zero(), m_new);
  reg sum = Isa::zero();
  for (int j = 0; j < j_begin; ++j) Isa::store(st + j * kTile + c, Isa::zero());
  for (int j = j_begin; j < j_end; ++j) {
    float* sj = st + j * kTile + c;
    reg p = Isa::exp(Isa::fma(Isa::load(sj), vs, neg_m));
    if constexpr (kMasked) p = Isa::keep(valid(j), p);
    Isa::store(sj, p);
    sum = Isa::add(sum, p);
  }
  for (int j = j_end; j < nk; ++j) Isa::store(st + j * kTile + c, Isa::zero());
  const reg a = Isa::exp(Isa::add(m_old, neg_m));  // exactly 1 where the shift stayed
  Isa::store(alpha + c, a);
  Isa::store(l + c, Isa::fma(Isa::load(l + c), a, sum));
  Isa::store(m + c, m_new);
}

// The forward's two products on fp32 operands, read from qkv (B,T,3C) as they are: the query
// tile transposed once (Qᵀ, HS x queries, into w.qt), then per key tile Sᵀ = K·Qᵀ into w.st and
// O (+)= P·V with P read through Sᵀ.
template <class Isa>
struct F32Products {
  const float* qkv;
  const Dims& d;
  int b, h;
  void queries(ForwardScratch& w, int q0, int nq) const {
    transpose_tile(w.qt.data(), kTile, qkv + d.at(b, q0, 3 * d.C, h), 3 * d.C, nq, d.HS);
  }
  void scores(ForwardScratch& w, int k0, int nk, int nq_pad, Band band) const {
    const float* K = qkv + d.at(b, k0, 3 * d.C, h) + d.C;
    gemm_tile<Isa>(w.st.data(), kTile, Operand{K, size_t(3) * d.C, 1}, w.qt.data(), kTile, nk,
                   nq_pad, d.HS, false, Causal::KeyRowsQueryCols, band);
  }
  void values(ForwardScratch& w, int k0, int nk, int nq, bool first, Band band) const {
    const float* V = qkv + d.at(b, k0, 3 * d.C, h) + 2 * d.C;
    gemm_tile<Isa>(w.o.data(), d.HS, Operand{w.st.data(), 1, kTile}, V, 3 * d.C, nq, d.HS, nk,
                   !first, Causal::QueryRowsKeyInner, band);
  }
};

// ---- bf16 operands (attention_forward_bf16) ----
// Requests the cache lines of n floats at p.
inline void prefetch_row(const float* p, int n) {
  for (int c = 0; c < n; c += 16) _mm_prefetch(reinterpret_cast<const char*>(p + c), _MM_HINT_T0);
}

// x (n floats, n a multiple of 8) rounded to bf16 in place (each value the float of its bf16),
// and written as bf16 into x16 (n / 2 pair words) unless null. Vectors of Isa, an 8-float tail
// with its narrow traits.
template <class Isa>
void round_row(float* x, uint32_t* x16, int n) {
  constexpr int L = Isa::kLanes;
  int c = 0;
  for (; c + L <= n; c += L) {
    const typename Isa::ireg r = Isa::round_high(Isa::load(x + c));
    if (x16) Isa::store_bf16(x16 + c / 2, r);
    Isa::store(x + c, Isa::as_reg(r));
  }
  if constexpr (L > 8)
    if (c < n) round_row<typename Isa::Narrow>(x + c, x16 ? x16 + c / 2 : nullptr, n - c);
}

// Two rows as bf16 pairs: dst[c] = (lo[c] in the low half, hi[c] in the high half), each rounded
// to bf16; hi null reads as zeros. n a multiple of 8; vectors as round_row's.
template <class Isa>
void pair_rows(uint32_t* dst, const float* lo, const float* hi, int n) {
  constexpr int L = Isa::kLanes;
  int c = 0;
  for (; c + L <= n; c += L)
    Isa::store_words(dst + c, Isa::pair(Isa::round_high(Isa::load(lo + c)),
                                        hi ? Isa::round_high(Isa::load(hi + c)) : Isa::round_high(Isa::zero())));
  if constexpr (L > 8)
    if (c < n) pair_rows<typename Isa::Narrow>(dst + c, lo + c, hi ? hi + c : nullptr, n - c);
}

// x (n floats, n a multiple of 8) rounded to bf16 into dst (n / 2 pair words), x untouched.
template <class Isa>
void bf16_row(uint32_t* dst, const float* x, int n) {
  constexpr int L = Isa::kLanes;
  int c = 0;
  for (; c + L <= n; c += L) Isa::store_bf16(dst + c / 2, Isa::round_high(Isa::load(x + c)));
  if constexpr (L > 8)
    if (c < n) bf16_row<typename Isa::Narrow>(dst + c / 2, x + c, n - c);
}

// dst (h2 x kTile words) = the first n rows (h2 pair words each, contiguous) of rows, transposed:
// row c of dst holds word c of every row; columns n..round_up8(n) are zeroed.
inline void transpose_pairs(uint32_t* dst, const uint32_t* rows, int h2, int n) {
  if (h2 % 8 == 0) {  // 32-bit words moved as floats (bits kept)
    transpose_tile(reinterpret_cast<float*>(dst), kTile, reinterpret_cast<const float*>(rows), h2, n, h2);
    return;
  }
  for (int c = 0; c < h2; ++c)
    for (int i = 0; i < round_up8(n); ++i) dst[size_t(c) * kTile + i] = i < n ? rows[size_t(i) * h2 + c] : 0;
}

// Per-thread bf16 operands of one head: its q and k rows (T x HS/2 pair words, bf16 rows), its v
// as pairs of rows (ceil(T/2) x HS words, row j/2 = (v_j, v_j+1)), the query tile's Qᵀ as pairs
// (HS/2 x kTile words) and the probabilities as pairs of key rows (kTile/2 x kTile words).
struct Bf16Scratch {
  std::vector<uint32_t> q, k, v, qt, p;
  Bf16Scratch(int T, int HS)
      : q(size_t(T) * HS / 2), k(q.size()), v(size_t(T + 1) / 2 * HS), qt(size_t(HS) / 2 * kTile),
        p(size_t(kTile) / 2 * kTile) {}
};

// Rounds head h of batch row b of qkv to bf16 in place (q, k and v: the values the products use
// and the backward reads) and packs them into s.
template <class Isa>
void pack_head_bf16(float* qkv, const Dims& d, int b, int h, Bf16Scratch& s) {
  constexpr int kAhead = 4;  // rows are 3C floats apart: beyond the hardware prefetchers' reach
  const int HS = d.HS, C3 = 3 * d.C;
  auto row = [&](int t) { return qkv + d.at(b, t, C3, h); };
  for (int t = 0; t < std::min(d.T, kAhead); ++t)
    for (int part = 0; part < 3; ++part) prefetch_row(row(t) + part * d.C, HS);
  for (int t = 0; t < d.T; t += 2) {  // rows t and t + 1: q and k rows, v as a pair of rows
    for (int u = t + kAhead; u < std::min(d.T, t + kAhead + 2); ++u)
      for (int part = 0; part < 3; ++part) prefetch_row(row(u) + part * d.C, HS);
    for (int u = t; u < std::min(d.T, t + 2); ++u) {
      round_row<Isa>(row(u), s.q.data() + size_t(u) * HS / 2, HS);
      round_row<Isa>(row(u) + d.C, s.k.data() + size_t(u) * HS / 2, HS);
    }
    pair_rows<Isa>(s.v.data() + size_t(t / 2) * HS, row(t) + 2 * d.C, t + 1 < d.T ? row(t + 1) + 2 * d.C : nullptr, HS);
    for (int u = t; u < std::min(d.T, t + 2); ++u) round_row<Isa>(row(u) + 2 * d.C, nullptr, HS);
  }
}

// The forward's two products on the bf16 operands of one head (pack_head_bf16), with vdpbf16ps
// where Isa has it: Sᵀ = K·Qᵀ on pairs of the head dimension, then P (fp32 from the softmax)
// rounded to bf16 pairs of keys and O (+)= P·V on pairs of keys. Sums in fp32.
template <class Isa>
struct Bf16Products {
  const Dims& d;
  Bf16Scratch& s;
  void queries(ForwardScratch&, int q0, int nq) const {  // Qᵀ: the q rows' pair words transposed
    transpose_pairs(s.qt.data(), s.q.data() + size_t(q0) * d.HS / 2, d.HS / 2, nq);
  }
  void scores(ForwardScratch& w, int k0, int nk, int nq_pad, Band band) const {
    gemm_tile<Isa>(w.st.data(), kTile, PairOperand{s.k.data() + size_t(k0) * d.HS / 2, size_t(d.HS) / 2, 1},
                   s.qt.data(), kTile, nk, nq_pad, d.HS, false, Causal::KeyRowsQueryCols, band);
  }
  void values(ForwardScratch& w, int k0, int nk, int nq, bool first, Band band) const {
    const int nq_pad = round_up8(nq);
    for (int j = 0; j < nk; j += 2)  // P as pairs of key rows, read as Pᵀ's view
      pair_rows<Isa>(s.p.data() + size_t(j / 2) * kTile, w.st.data() + size_t(j) * kTile,
                j + 1 < nk ? w.st.data() + size_t(j + 1) * kTile : nullptr, nq_pad);
    gemm_tile<Isa>(w.o.data(), d.HS, PairOperand{s.p.data(), 1, kTile}, s.v.data() + size_t(k0 / 2) * d.HS,
                   d.HS, nq, d.HS, nk, !first, Causal::QueryRowsKeyInner, band);
  }
};

// One query tile of one head: out rows q0..q0+nq-1 (and in bf16 into out16 unless null) and their
// lse, the products computed by `products` (F32Products, Bf16Products). With `resume`, out and lse
// already hold these queries' softmax over other keys (Strided's window), and the online softmax
// starts from it (shift lse, sum 1, partial output out): the result is the softmax over both.
template <class Isa, class Products>
void forward_query_tile(float* out, bf16* out16, float* lse, const Products& products, const Dims& d,
                        const TileMasks& masks, int b, int h, int qt, ForwardScratch& w,
                        bool resume = false) {
  const int HS = d.HS, q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
  const int nq_pad = round_up8(nq);
  float* lse_q0 = lse + (static_cast<size_t>(b) * d.NH + h) * d.T + q0;
  products.queries(w, q0, nq);
  // A finite "minus infinity" keeps every rescale factor exp(m_old - m_new) NaN-free.
  std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<float>::max());
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  for (int i = 0; i < nq && resume; ++i) {
    w.m[i] = lse_q0[i];
    w.l[i] = 1.0f;
    std::copy_n(out + d.at(b, q0 + i, d.C, h), HS, w.o.data() + i * HS);
  }
  bool first = !resume;  // the first active key tile overwrites O: no zeroing, no rescaling
  for (int kt = 0; kt < d.key_tiles_end(qt); ++kt) {
    const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0);
    if (masks.kind[masks.at(qt, kt)] == Tile::Empty) continue;
    const TileMask& mask = masks.mask[masks.at(qt, kt)];
    const Band band = d.band(q0, k0);
    products.scores(w, k0, nk, nq_pad, band);  // Sᵀ = K·Qᵀ
    for (int c = 0; c < nq_pad; c += Isa::kLanes) {
      // some lane (query) is padding or misses some key of the tile
      const uint64_t lanes = ((uint64_t{1} << Isa::kLanes) - 1) << c;
      const bool masked = (mask.all & lanes) != lanes;
      (masked ? softmax_update<Isa, true> : softmax_update<Isa, false>)(
          w.st.data(), nk, c, band, mask, d.scale, w.m.data(), w.l.data(), w.alpha.data());
    }
    for (int i = 0; i < nq && !first; ++i) {
      if (w.alpha[i] == 1.0f) continue;
      float* orow = w.o.data() + i * HS;
      const __m256 va = _mm256_set1_ps(w.alpha[i]);
      for (int c = 0; c < HS; c += 8)
        _mm256_storeu_ps(orow + c, _mm256_mul_ps(va, _mm256_loadu_ps(orow + c)));
    }
    products.values(w, k0, nk, nq, first, band);  // O (+)= P·V
    first = false;
  }
  for (int i = 0; i < nq; ++i) {
    const size_t at = d.at(b, q0 + i, d.C, h);
    const __m256 inv = _mm256_set1_ps(1.0f / w.l[i]);
    for (int c = 0; c < HS; c += 8) {
      const __m256 o = _mm256_mul_ps(inv, _mm256_loadu_ps(w.o.data() + i * HS + c));
      _mm256_storeu_ps(out + at + c, o);
      if (out16) cpu::store(out16 + at + c, cpu::AllLanes{}, o);
    }
    lse_q0[i] = w.m[i] + std::log(w.l[i]);
  }
}

// Per-thread scratch for the backward of one (batch, head): tile buffers, D (T), and per query
// tile whether its dQ rows have been written yet.
struct BackwardScratch {
  std::vector<float> kt, vt, p, ds, D;
  std::vector<char> dq_written;
  BackwardScratch(int HS, int T, int n_tiles)
      : kt(HS * kTile), vt(HS * kTile), p(kTile * kTile), ds(kTile * kTile), D(T),
        dq_written(n_tiles) {}
};

// dS row in place over dP (kTile-wide rows): dS_j = P_j · (dP_j - D_i) · scale where bit j of
// `allowed` is set, else 0, up to n_pad (and up to the end of the last vector).
template <class Isa>
void ds_row(float* ds, const float* p, int n_pad, uint64_t allowed, float D_i, float scale) {
  const typename Isa::reg vd = Isa::set1(D_i), vs = Isa::set1(scale);
  const int n_valid = row_end(allowed), j_begin = row_begin(allowed, Isa::kLanes);
  std::fill_n(ds, j_begin, 0.0f);
  int j = j_begin;
  for (; j < n_valid; j += Isa::kLanes) {
    const typename Isa::reg pj = Isa::mul(Isa::load(p + j), vs);
    const typename Isa::reg dsj = Isa::mul(pj, Isa::sub(Isa::load(ds + j), vd));
    Isa::store(ds + j, Isa::keep(Isa::from_bits(allowed >> j), dsj));
  }
  for (; j < n_pad; ++j) ds[j] = 0.0f;
}

// D_t = rowsum(dO_t ∘ O_t) for one row of dO (g) and O (o), n a multiple of 8; with kRounded, dO
// rounded to bf16 first (the dO the bf16 backward's products use).
template <bool kRounded>
float out_grad_dot(const float* g, const float* o, int n) {
  __m256 acc = _mm256_setzero_ps();
  for (int c = 0; c < n; c += 8) {
    __m256 gc = _mm256_loadu_ps(g + c);
    if constexpr (kRounded) gc = Avx2::as_reg(Avx2::round_high(gc));
    acc = _mm256_fmadd_ps(gc, _mm256_loadu_ps(o + c), acc);
  }
  return hsum(acc);
}

// The backward's five products on fp32 operands, read from qkv and dout as they are: per key tile
// Kᵀ and Vᵀ transposed once (into w.kt, w.vt), per tile pair S = Q·Kᵀ, dP = dO·Vᵀ, then
// dV (+)= Pᵀ·dO, dK (+)= dSᵀ·Q and dQ (+)= dS·K with Pᵀ and dSᵀ read as views. D_t = rowsum(dO_t ∘ O_t).
template <class Isa>
struct F32BackwardProducts {
  const float *dout, *qkv, *out;
  const Dims& d;
  int b, h;
  BackwardScratch& w;
  void prepare(float* D) const {
    for (int t = 0; t < d.T; ++t)
      D[t] = out_grad_dot<false>(dout + d.at(b, t, d.C, h), out + d.at(b, t, d.C, h), d.HS);
  }
  void key_tile(int k0, int nk) const {
    const float* K = qkv + d.at(b, k0, 3 * d.C, h) + d.C;
    transpose_tile(w.kt.data(), kTile, K, 3 * d.C, nk, d.HS);
    transpose_tile(w.vt.data(), kTile, K + d.C, 3 * d.C, nk, d.HS);
  }
  void scores(float* p, float* dp, int q0, int nq, int nk_pad, Band band) const {
    gemm_tile<Isa>(p, kTile, Operand{qkv + d.at(b, q0, 3 * d.C, h), size_t(3) * d.C, 1}, w.kt.data(), kTile, nq,
                   nk_pad, d.HS, false, Causal::QueryRowsKeyCols, band);  // S = Q·Kᵀ
    gemm_tile<Isa>(dp, kTile, Operand{dout + d.at(b, q0, d.C, h), size_t(d.C), 1}, w.vt.data(), kTile, nq, nk_pad,
                   d.HS, false, Causal::QueryRowsKeyCols, band);  // dP = dO·Vᵀ
  }
  // dK, dV: the key tile's rows of dqkv (overwritten when `first`); dQ the query tile's.
  void gradients(float* dK, float* dV, float* dQ, float* p, float* ds, int q0, int nq, int k0, int nk,
                 bool first, bool dq_accumulate, Band band) const {
    const int C3 = 3 * d.C;
    const float* Q = qkv + d.at(b, q0, C3, h);
    const Operand p_t{p, 1, kTile}, ds_t{ds, 1, kTile};  // Pᵀ, dSᵀ as views
    gemm_tile<Isa>(dV, C3, p_t, dout + d.at(b, q0, d.C, h), d.C, nk, d.HS, nq, !first, Causal::KeyRowsQueryInner,
                   band);  // dV (+)= Pᵀ·dO
    gemm_tile<Isa>(dK, C3, ds_t, Q, C3, nk, d.HS, nq, !first, Causal::KeyRowsQueryInner, band);  // dK (+)= dSᵀ·Q
    gemm_tile<Isa>(dQ, C3, Operand{ds, kTile, 1}, qkv + d.at(b, k0, C3, h) + d.C, C3, nq, d.HS, nk, dq_accumulate,
                   Causal::QueryRowsKeyInner, band);  // dQ (+)= dS·K
  }
};

// Per-thread bf16 operands of one head for the backward on bf16 (backward_bf16): the rows of q, k,
// v and dO as pair words along the head dimension (T x HS/2; the A operands of S = Q·Kᵀ and
// dP = dO·Vᵀ, and the rows the key tile's Kᵀ, Vᵀ are transposed from), q, k and dO as pairs of
// rows ((T+1)/2 x HS, row t/2 = (x_t, x_t+1); the B operands of dK = dSᵀ·Q, dQ = dS·K and
// dV = Pᵀ·dO); per key tile Kᵀ, Vᵀ (HS/2 x kTile); per tile pair P and dS as pairs of query rows
// (kTile/2 x kTile: Pᵀ and dSᵀ read as views) and dS as pair words along keys (kTile x kTile/2).
struct Bf16BackwardScratch {
  std::vector<uint32_t> q, k, v, g, q2, k2, g2, kt, vt, p2, ds2, dsk;
  Bf16BackwardScratch(int T, int HS)
      : q(size_t(T) * HS / 2), k(q.size()), v(q.size()), g(q.size()), q2(size_t(T + 1) / 2 * HS), k2(q2.size()),
        g2(q2.size()), kt(size_t(HS) / 2 * kTile), vt(kt.size()), p2(size_t(kTile) / 2 * kTile), ds2(p2.size()),
        dsk(p2.size()) {}
};

// The backward's five products on bf16 operands (backward_bf16), vdpbf16ps where Isa has it: q, k
// and v are the bf16 values the forward left in qkv (packed exactly), dO is dout rounded to bf16
// (nearest even), and P and dS are rounded to bf16 where they weight dO, Q and K; every sum in
// fp32. D_t = rowsum(dO_t ∘ O_t) with the rounded dO (the dO that dP is computed from).
template <class Isa>
struct Bf16BackwardProducts {
  const Dims& d;
  Bf16BackwardScratch& s;
  const float *dout, *qkv, *out;
  int b, h;
  void prepare(float* D) const {
    const int HS = d.HS, H2 = HS / 2, C3 = 3 * d.C;
    auto row = [&](int t) { return qkv + d.at(b, t, C3, h); };
    auto grad = [&](int t) { return dout + d.at(b, t, d.C, h); };
    for (int t = 0; t < d.T; ++t) {
      const size_t at = size_t(t) * H2;
      bf16_row<Isa>(s.q.data() + at, row(t), HS);
      bf16_row<Isa>(s.k.data() + at, row(t) + d.C, HS);
      bf16_row<Isa>(s.v.data() + at, row(t) + 2 * d.C, HS);
      bf16_row<Isa>(s.g.data() + at, grad(t), HS);
      D[t] = out_grad_dot<true>(grad(t), out + d.at(b, t, d.C, h), HS);
    }
    for (int t = 0; t < d.T; t += 2) {
      const bool odd = t + 1 < d.T;
      const size_t at = size_t(t / 2) * HS;
      pair_rows<Isa>(s.q2.data() + at, row(t), odd ? row(t + 1) : nullptr, HS);
      pair_rows<Isa>(s.k2.data() + at, row(t) + d.C, odd ? row(t + 1) + d.C : nullptr, HS);
      pair_rows<Isa>(s.g2.data() + at, grad(t), odd ? grad(t + 1) : nullptr, HS);
    }
  }
  void key_tile(int k0, int nk) const {
    transpose_pairs(s.kt.data(), s.k.data() + size_t(k0) * d.HS / 2, d.HS / 2, nk);
    transpose_pairs(s.vt.data(), s.v.data() + size_t(k0) * d.HS / 2, d.HS / 2, nk);
  }
  void scores(float* p, float* dp, int q0, int nq, int nk_pad, Band band) const {
    const size_t H2 = d.HS / 2;
    gemm_tile<Isa>(p, kTile, PairOperand{s.q.data() + q0 * H2, H2, 1}, s.kt.data(), kTile, nq, nk_pad, d.HS, false,
                   Causal::QueryRowsKeyCols, band);  // S = Q·Kᵀ
    gemm_tile<Isa>(dp, kTile, PairOperand{s.g.data() + q0 * H2, H2, 1}, s.vt.data(), kTile, nq, nk_pad, d.HS, false,
                   Causal::QueryRowsKeyCols, band);  // dP = dO·Vᵀ
  }
  void gradients(float* dK, float* dV, float* dQ, float* p, float* ds, int q0, int nq, int k0, int nk,
                 bool first, bool dq_accumulate, Band band) const {
    const int C3 = 3 * d.C, HS = d.HS, nk_pad = round_up8(nk);
    for (int i = 0; i < nq; i += 2) {  // P and dS as pairs of query rows
      const bool odd = i + 1 < nq;
      pair_rows<Isa>(s.p2.data() + size_t(i / 2) * kTile, p + i * kTile, odd ? p + (i + 1) * kTile : nullptr, nk_pad);
      pair_rows<Isa>(s.ds2.data() + size_t(i / 2) * kTile, ds + i * kTile, odd ? ds + (i + 1) * kTile : nullptr,
                     nk_pad);
    }
    for (int i = 0; i < nq; ++i) bf16_row<Isa>(s.dsk.data() + size_t(i) * kTile / 2, ds + i * kTile, nk_pad);
    const size_t q_pairs = size_t(q0 / 2) * HS;
    gemm_tile<Isa>(dV, C3, PairOperand{s.p2.data(), 1, kTile}, s.g2.data() + q_pairs, HS, nk, HS, nq, !first,
                   Causal::KeyRowsQueryInner, band);  // dV (+)= Pᵀ·dO
    gemm_tile<Isa>(dK, C3, PairOperand{s.ds2.data(), 1, kTile}, s.q2.data() + q_pairs, HS, nk, HS, nq, !first,
                   Causal::KeyRowsQueryInner, band);  // dK (+)= dSᵀ·Q
    gemm_tile<Isa>(dQ, C3, PairOperand{s.dsk.data(), kTile / 2, 1}, s.k2.data() + size_t(k0 / 2) * HS, HS, nq, HS,
                   nk, dq_accumulate, Causal::QueryRowsKeyInner, band);  // dQ (+)= dS·K
  }
};

// dqkv for one (batch, head): this call owns its dq, dk and dv columns entirely. Key tiles
// outside, query tiles inside; the products computed by `products` (F32BackwardProducts,
// Bf16BackwardProducts), the softmax's backward in fp32 between them.
template <class Isa, class Products>
void backward_tiles(float* dqkv, const float* lse, const Products& products, const Dims& d,
                    const TileMasks& masks, int b, int h, BackwardScratch& w) {
  const int C3 = 3 * d.C, HS = d.HS;
  const float* lse_bh = lse + (static_cast<size_t>(b) * d.NH + h) * d.T;
  products.prepare(w.D.data());  // D_t = rowsum(dO_t ∘ O_t)
  std::fill(w.dq_written.begin(), w.dq_written.end(), 0);
  for (int kt = 0; kt < d.n_tiles; ++kt) {
    const int k0 = kt * kTile, nk = std::min(kTile, d.T - k0), nk_pad = round_up8(nk);
    float* dK = dqkv + d.at(b, k0, C3, h) + d.C;  // dK, dV of this key tile: written by the
    float* dV = dK + d.C;                         // first active query tile, then accumulated
    products.key_tile(k0, nk);
    bool first = true;
    for (int qt = d.query_tiles_begin(kt); qt < d.n_tiles; ++qt) {
      const int q0 = qt * kTile, nq = std::min(kTile, d.T - q0);
      if (masks.kind[masks.at(qt, kt)] == Tile::Empty) continue;
      const TileMask& mask = masks.mask[masks.at(qt, kt)];
      const Band band = d.band(q0, k0);
      float *p = w.p.data(), *ds = w.ds.data();
      products.scores(p, ds, q0, nq, nk_pad, band);  // S into p, dP into ds
      for (int i = 0; i < nq; ++i) {  // P = exp(S·scale - lse); dS = P ∘ (dP - D)·scale
        const uint64_t allowed = mask.row[i];
        probability_row<Isa>(p + i * kTile, nk_pad, allowed, d.scale, lse_bh[q0 + i]);
        ds_row<Isa>(ds + i * kTile, p + i * kTile, nk_pad, allowed, w.D[q0 + i], d.scale);
      }
      // dQ (+)= dS·K: the first time overwritten
      products.gradients(dK, dV, dqkv + d.at(b, q0, C3, h), p, ds, q0, nq, k0, nk, first, w.dq_written[qt] != 0,
                         band);
      w.dq_written[qt] = 1;
      first = false;
    }
    if (first)  // no active query tile: these keys get no gradient
      for (int j = 0; j < nk; ++j) {
        std::fill_n(dK + static_cast<size_t>(j) * C3, HS, 0.0f);
        std::fill_n(dV + static_cast<size_t>(j) * C3, HS, 0.0f);
      }
  }
  for (int qt = 0; qt < d.n_tiles; ++qt)  // no active key tile: these queries get no gradient
    if (!w.dq_written[qt])
      for (int t = qt * kTile; t < std::min(d.T, (qt + 1) * kTile); ++t)
        std::fill_n(dqkv + d.at(b, t, C3, h), HS, 0.0f);
}

// The fp32 backward of one (batch, head).
template <class Isa>
void backward_head(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, const Dims& d, const TileMasks& masks, int b, int h,
                   BackwardScratch& w) {
  backward_tiles<Isa>(dqkv, lse, F32BackwardProducts<Isa>{dout, qkv, out, d, b, h, w}, d, masks, b, h, w);
}

// ---- Strided{w, s}: the window, then the strided pairs per residue class ----
// Every strided column of Strided touches every tile below the diagonal, so it is computed as two
// parts: the window Local(w) over the whole head (the banded tile loops), then the pairs beyond
// it, i - j = m·s with m >= m0 = ceil(w / s). Those never leave a residue class r = i mod s, and
// within one they are causal attention shifted by m0 rows: query r + (t + m0)·s attends the keys
// r, r + s, ..., r + t·s. So each class is packed into a contiguous sequence, row t = [q of
// position r + (t + m0)·s | k, v of position r + t·s], and run through the same tile loops under
// Causal, its online softmax resumed from its queries' softmax over the window (out, lse): the
// result is the softmax over both parts. The backward of each part needs only the final lse and
// D (flash-attention backward), so the class's packed gradients are added into dqkv after the
// window's pass wrote it.

// The pattern of the pass over whole heads: Local(w) for Strided, else the pattern itself.
AttentionPattern head_pattern(const AttentionPattern& pattern) {
  return pattern.kind() == AttentionPattern::Kind::Strided ? AttentionPattern::local(pattern.window())
                                                           : pattern;
}

// The residue classes r < min(s, T) of a Strided pattern beyond its window, each a causal
// sequence of n(r) = max(0, ceil((T - r) / s) - m0) rows (a query with no strided pair beyond the
// window is in none). Lengths differ by at most one, so two Dims and TileMasks serve them all.
class StridedClasses {
 public:
  StridedClasses(const AttentionPattern& strided, const Dims& d, bool key_rows)
      : T_(d.T), s_(strided.stride()), m0_((strided.window() + s_ - 1) / s_),
        count_(std::min(s_, T_)) {
    for (int n : {length(0), length(count_ - 1)})
      if (n > 0 && (packed_.empty() || n != packed_[0].d.T)) {
        const Dims pd(1, n, d.HS, 1, AttentionPattern::causal());
        packed_.push_back({pd, TileMasks(AttentionPattern::causal(), pd, key_rows)});
      }
  }
  int count() const { return count_; }
  int length(int r) const { return std::max(0, (T_ - r + s_ - 1) / s_ - m0_); }
  int longest() const { return length(0); }
  int query(int r, int t) const { return r + (t + m0_) * s_; }  // position of row t's query
  int key(int r, int t) const { return r + t * s_; }            // position of row t's key
  // The packed sequence (B = NH = 1, T = length(r) > 0, C = HS) of class r and its masks.
  struct Packed {
    Dims d;
    TileMasks masks;
  };
  const Packed& packed(int r) const { return packed_[length(r) == longest() ? 0 : 1]; }

 private:
  int T_, s_, m0_, count_;
  std::vector<Packed> packed_;
};

// Per-thread buffers of one packed class: qkv (n, 3·HS), and per query row out (n, HS), lse (n),
// dout (n, HS), dqkv (n, 3·HS); n <= T / s + 1.
struct PackedScratch {
  std::vector<float> qkv, out, lse, dout, dqkv;
  PackedScratch(int n, int HS)
      : qkv(size_t(n) * 3 * HS), out(size_t(n) * HS), lse(n), dout(size_t(n) * HS),
        dqkv(size_t(n) * 3 * HS) {}
};

// dst[c] = src[c] for c < n (a multiple of 8).
inline void copy_row(float* dst, const float* src, int n) {
  for (int c = 0; c < n; c += 8) _mm256_storeu_ps(dst + c, _mm256_loadu_ps(src + c));
}

// dst[c] += src[c] for c < n (a multiple of 8).
inline void add_row(float* dst, const float* src, int n) {
  for (int c = 0; c < n; c += 8)
    _mm256_storeu_ps(dst + c, _mm256_add_ps(_mm256_loadu_ps(dst + c), _mm256_loadu_ps(src + c)));
}

// Calls f(t, i, j) for the rows t of class r in order (i its query's position, j its key's), and
// touch(i, j) for the row kAhead further on first: a class's rows are s positions apart, out of
// reach of the hardware prefetchers, so touch prefetches what f will read.
template <class Touch, class F>
void for_each_class_row(const StridedClasses& classes, int r, Touch touch, F f) {
  constexpr int kAhead = 4;
  const int n = classes.length(r);
  for (int t = 0; t < std::min(n, kAhead); ++t) touch(classes.query(r, t), classes.key(r, t));
  for (int t = 0; t < n; ++t) {
    if (t + kAhead < n) touch(classes.query(r, t + kAhead), classes.key(r, t + kAhead));
    f(t, classes.query(r, t), classes.key(r, t));
  }
}

// Packs the q, k and v rows of class r of (batch b, head h) into w.qkv.
void pack_qkv(PackedScratch& w, const float* qkv, const Dims& d, const StridedClasses& classes,
              int b, int h, int r) {
  const int HS = d.HS, C3 = 3 * d.C;
  auto q = [&](int i) { return qkv + d.at(b, i, C3, h); };
  auto kv = [&](int j) { return qkv + d.at(b, j, C3, h) + d.C; };  // k, then v d.C further
  for_each_class_row(
      classes, r,
      [&](int i, int j) {
        prefetch_row(q(i), HS);
        prefetch_row(kv(j), HS);
        prefetch_row(kv(j) + d.C, HS);
      },
      [&](int t, int i, int j) {
        float* row = w.qkv.data() + size_t(t) * 3 * HS;
        copy_row(row, q(i), HS);
        copy_row(row + HS, kv(j), HS);
        copy_row(row + 2 * HS, kv(j) + d.C, HS);
      });
}

// Packs out and lse (and dout, unless null) of the queries of class r of (batch b, head h) into w.
void pack_query_rows(PackedScratch& w, const float* out, const float* dout, const float* lse,
                     const Dims& d, const StridedClasses& classes, int b, int h, int r) {
  const int HS = d.HS;
  const float* lse_bh = lse + (static_cast<size_t>(b) * d.NH + h) * d.T;
  auto row = [&](const float* x, int i) { return x + d.at(b, i, d.C, h); };
  for_each_class_row(
      classes, r,
      [&](int i, int) {
        prefetch_row(row(out, i), HS);
        if (dout) prefetch_row(row(dout, i), HS);
      },
      [&](int t, int i, int) {
        copy_row(w.out.data() + size_t(t) * HS, row(out, i), HS);
        if (dout) copy_row(w.dout.data() + size_t(t) * HS, row(dout, i), HS);
        w.lse[t] = lse_bh[i];
      });
}

// Forward of class r of (batch b, head h): its queries' softmax over the window (out, lse) resumed
// over the class's keys, packed, and written back.
template <class Isa>
void forward_class(float* out, float* lse, const float* qkv, const Dims& d,
                   const StridedClasses& classes, int b, int h, int r, ForwardScratch& fw,
                   PackedScratch& w) {
  const StridedClasses::Packed& p = classes.packed(r);
  pack_qkv(w, qkv, d, classes, b, h, r);
  pack_query_rows(w, out, nullptr, lse, d, classes, b, h, r);
  for (int qt = 0; qt < p.d.n_tiles; ++qt)
    forward_query_tile<Isa>(w.out.data(), nullptr, w.lse.data(), F32Products<Isa>{w.qkv.data(), p.d, 0, 0},
                            p.d, p.masks, 0, 0, qt, fw, /*resume=*/true);
  float* lse_bh = lse + (static_cast<size_t>(b) * d.NH + h) * d.T;
  for (int t = 0; t < classes.length(r); ++t) {
    const int i = classes.query(r, t);
    copy_row(out + d.at(b, i, d.C, h), w.out.data() + size_t(t) * d.HS, d.HS);
    lse_bh[i] = w.lse[t];
  }
}

// Backward of class r of (batch b, head h): packed with the final out, lse and dout of its
// queries, its gradients added into dqkv.
template <class Isa>
void backward_class(float* dqkv, const float* dout, const float* qkv, const float* out,
                    const float* lse, const Dims& d, const StridedClasses& classes, int b, int h,
                    int r, BackwardScratch& bw, PackedScratch& w) {
  const StridedClasses::Packed& p = classes.packed(r);
  const int HS = d.HS, C3 = 3 * d.C;
  pack_qkv(w, qkv, d, classes, b, h, r);
  pack_query_rows(w, out, dout, lse, d, classes, b, h, r);
  backward_head<Isa>(w.dqkv.data(), w.dout.data(), w.qkv.data(), w.out.data(), w.lse.data(), p.d,
                     p.masks, 0, 0, bw);
  auto dq = [&](int i) { return dqkv + d.at(b, i, C3, h); };
  auto dkv = [&](int j) { return dqkv + d.at(b, j, C3, h) + d.C; };  // dk, then dv d.C further
  for_each_class_row(
      classes, r,
      [&](int i, int j) {
        prefetch_row(dq(i), HS);
        prefetch_row(dkv(j), HS);
        prefetch_row(dkv(j) + d.C, HS);
      },
      [&](int t, int i, int j) {
        const float* g = w.dqkv.data() + size_t(t) * 3 * HS;
        add_row(dq(i), g, HS);
        add_row(dkv(j), g + HS, HS);
        add_row(dkv(j) + d.C, g + 2 * HS, HS);
      });
}

// The kernels' entry points for traits Isa; each parallel work item is computed by one thread.
// Under Strided an item is a whole (batch, head): its window's tiles, then its classes, which so
// find the head's rows (and the window's out and lse) still in cache.
template <class Isa>
void forward(float* out, bf16* out16, float* lse, const float* qkv, int B, int T, int C, int NH,
             const AttentionPattern& pattern) {
  const AttentionPattern head = head_pattern(pattern);
  const Dims d(B, T, C, NH, head);
  const TileMasks masks(head, d, /*key_rows=*/true);
  const std::optional<StridedClasses> classes =
      head == pattern ? std::nullopt : std::optional(StridedClasses(pattern, d, true));
#pragma omp parallel
  {
    ForwardScratch w(d.HS);
    if (!classes) {
      // Head by head, so that a head's K and V stay in cache across its query tiles; within a
      // head the longest query tiles (most key tiles) first. Each item writes only its own rows.
#pragma omp for schedule(dynamic, 1)
      for (int item = 0; item < B * NH * d.n_tiles; ++item) {
        const int bh = item / d.n_tiles, qt = d.n_tiles - 1 - item % d.n_tiles;
        forward_query_tile<Isa>(out, out16, lse, F32Products<Isa>{qkv, d, bh / NH, bh % NH}, d, masks, bh / NH,
                                bh % NH, qt, w);
      }
    } else {
      PackedScratch pw(classes->longest(), d.HS);
#pragma omp for schedule(dynamic, 1)
      for (int bh = 0; bh < B * NH; ++bh) {
        for (int qt = d.n_tiles - 1; qt >= 0; --qt)
          forward_query_tile<Isa>(out, nullptr, lse, F32Products<Isa>{qkv, d, bh / NH, bh % NH}, d, masks,
                                  bh / NH, bh % NH, qt, w);
        for (int r = 0; r < classes->count(); ++r)
          if (classes->length(r) > 0)
            forward_class<Isa>(out, lse, qkv, d, *classes, bh / NH, bh % NH, r, w, pw);
        // the head's rows are final only now: their bf16 copy, while they are in cache
        for (int t = 0; out16 && t < T; ++t) {
          const size_t at = d.at(bh / NH, t, d.C, bh % NH);
          for (int c = 0; c < d.HS; c += 8)
            cpu::store(out16 + at + c, cpu::AllLanes{}, _mm256_loadu_ps(out + at + c));
        }
      }
    }
  }
}

// The forward on bf16 operands (attention_forward_bf16): qkv rounded in place head by head as
// each is packed, the products on the packed bf16 operands, the softmax in fp32. Where ops.h's
// attention_bf16_operands says no, the fp32 forward on qkv as it is.
template <class Isa>
void forward_bf16(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C, int NH,
                  const AttentionPattern& pattern) {
  if (!attention_bf16_operands(pattern, T)) return forward<Isa>(out, out16, lse, qkv, B, T, C, NH, pattern);
  const Dims d(B, T, C, NH, pattern);
  const TileMasks masks(pattern, d, /*key_rows=*/true);
#pragma omp parallel
  {
    ForwardScratch w(d.HS);
    Bf16Scratch s(T, d.HS);
    // Head by head: each packs its operands once for all its query tiles (longest first).
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      pack_head_bf16<Isa>(qkv, d, bh / NH, bh % NH, s);
      const Bf16Products<Isa> products{d, s};
      for (int qt = d.n_tiles - 1; qt >= 0; --qt)
        forward_query_tile<Isa>(out, out16, lse, products, d, masks, bh / NH, bh % NH, qt, w);
    }
  }
}

template <class Isa>
void backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
              int B, int T, int C, int NH, const AttentionPattern& pattern) {
  const AttentionPattern head = head_pattern(pattern);
  const Dims d(B, T, C, NH, head);
  const TileMasks masks(head, d, /*key_rows=*/false);
  const std::optional<StridedClasses> classes =
      head == pattern ? std::nullopt : std::optional(StridedClasses(pattern, d, false));
#pragma omp parallel
  {
    BackwardScratch w(d.HS, T, d.n_tiles);
    PackedScratch pw(classes ? classes->longest() : 0, d.HS);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      backward_head<Isa>(dqkv, dout, qkv, out, lse, d, masks, bh / NH, bh % NH, w);
      for (int r = 0; classes && r < classes->count(); ++r)
        if (classes->length(r) > 0)
          backward_class<Isa>(dqkv, dout, qkv, out, lse, d, *classes, bh / NH, bh % NH, r, w, pw);
    }
  }
}

// The backward after forward_bf16 (attention_backward_bf16): the products on bf16 operands
// (Bf16BackwardProducts) where attention_bf16_operands says so, else the fp32 backward.
template <class Isa>
void backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                   int T, int C, int NH, const AttentionPattern& pattern) {
  if (!attention_bf16_operands(pattern, T)) return backward<Isa>(dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
  const Dims d(B, T, C, NH, pattern);
  const TileMasks masks(pattern, d, /*key_rows=*/false);
#pragma omp parallel
  {
    BackwardScratch w(d.HS, T, d.n_tiles);
    Bf16BackwardScratch s(T, d.HS);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh)
      backward_tiles<Isa>(dqkv, lse, Bf16BackwardProducts<Isa>{d, s, dout, qkv, out, bh / NH, bh % NH}, d, masks,
                          bh / NH, bh % NH, w);
  }
}

}  // namespace
}  // namespace frugal::kernels::attention_detail
