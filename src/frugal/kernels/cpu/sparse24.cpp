// 2:4 sparse linear products on CPU: packing of W and Wᵀ, the panel driver (OpenMP), the
// transposes around the micro-kernel, and the instruction-set dispatch.
#include "frugal/kernels/cpu/sparse24.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels {
namespace {

using sparse24_detail::ChunkArgs;
using sparse24_detail::IsaKernel;
using sparse24_detail::kChunkGroups;
using sparse24_detail::kClasses;
using sparse24_detail::kClassRows;
using sparse24_detail::kPanelRowBytes;
using sparse24_detail::kPanelWidth;

// ---- instruction-set selection ----

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

std::atomic<Sparse24Isa> g_isa{Sparse24Isa::Auto};

Sparse24Isa resolve(Sparse24Isa isa) {
  if (isa == Sparse24Isa::Auto) return cpu_has_avx512() ? Sparse24Isa::Avx512 : Sparse24Isa::Avx2;
  return isa;
}

const IsaKernel& active_kernel() {
  return resolve(g_isa.load()) == Sparse24Isa::Avx512 ? sparse24_detail::avx512_kernel()
                                                      : sparse24_detail::avx2_kernel();
}

// ---- packing ----

int chunk_count(int groups) { return (groups + kChunkGroups - 1) / kChunkGroups; }

void resize_matrix(Sparse24Matrix& m, int rows, int cols, bool classed) {
  const size_t units = static_cast<size_t>(rows / 4) * (cols / 4);
  const size_t offsets = units * (classed ? 4 : 8);
  const size_t counts =
      classed ? static_cast<size_t>(rows / 4) * chunk_count(cols / 4) * kClasses : 0;
  if (m.values.size() != units * 8) m.values.resize(units * 8);
  if (m.offsets.size() != offsets) m.offsets.resize(offsets);
  if (m.class_counts.size() != counts) m.class_counts.resize(counts);
  m.rows = rows;
  m.cols = cols;
  m.classed = classed;
}

// Packs one row-only unit (8 values, 8 offsets) from a 4x4 block: row r of the unit keeps the
// entries at(r, c) whose bit c of keep[r] is set. Branch-free (mask bits are unpredictable); returns
// false when some keep[r] does not have exactly two bits.
template <class At>
bool pack_unit(float* values, uint16_t* offsets, const uint32_t keep[4], const At& at) {
  bool ok = true;
  for (int r = 0; r < 4; ++r) {
    const uint32_t k = keep[r] | 0x30u;  // guard bits keep both ctz defined for bad masks
    const int c0 = __builtin_ctz(k), c1 = __builtin_ctz(k & (k - 1)) & 3;
    ok &= __builtin_popcount(keep[r]) == 2;
    values[2 * r] = at(r, c0 & 3);
    values[2 * r + 1] = at(r, c1);
    offsets[2 * r] = static_cast<uint16_t>((c0 & 3) * kPanelRowBytes);
    offsets[2 * r + 1] = static_cast<uint16_t>(c1 * kPanelRowBytes);
  }
  return ok;
}

// Classifies a 4x4 block, keep[r] = kept bits of row r (bit c: column c), for the class kernel:
// its class (sparse24_microkernel.h) and the block column of each slot. False when the block
// does not keep exactly two entries in every row and every column.
bool classify_block(const uint32_t keep[4], int& cls, int slot_col[4]) {
  uint32_t col_rows[4] = {0, 0, 0, 0};  // rows keeping each column, as bits
  bool ok = true;
  for (int r = 0; r < 4; ++r) {
    ok &= __builtin_popcount(keep[r]) == 2;
    for (int c = 0; c < 4; ++c) col_rows[c] |= ((keep[r] >> c) & 1u) << r;
  }
  for (int c = 0; c < 4; ++c) ok &= __builtin_popcount(col_rows[c]) == 2;
  if (!ok) return false;
  for (int partner = 1; partner < 4; ++partner)
    if (keep[partner] == keep[0]) {  // two 2x2 sub-blocks: rows {0, partner} and the others
      const uint32_t other = ~keep[0] & 15u;
      cls = 2 + partner;
      slot_col[0] = __builtin_ctz(keep[0]);
      slot_col[1] = __builtin_ctz(keep[0] & (keep[0] - 1));
      slot_col[2] = __builtin_ctz(other);
      slot_col[3] = __builtin_ctz(other & (other - 1));
      return true;
    }
  // One 8-cycle: walk it from row 0, in the direction that visits the rows in a class's order
  // (the second row of the walk has a lower index than the fourth).
  for (uint32_t start = keep[0];; start &= start - 1) {
    int order[4] = {0, 0, 0, 0}, col = __builtin_ctz(start);
    for (int j = 0; j < 3; ++j) {
      slot_col[j] = col;
      order[j + 1] = __builtin_ctz(col_rows[col] & ~(1u << order[j]));
      col = __builtin_ctz(keep[order[j + 1]] & ~(1u << col));
    }
    slot_col[3] = col;
    if (order[1] < order[3]) {
      cls = order[2] == 2 ? 0 : order[2] == 3 ? 1 : 2;
      return true;
    }
  }
}

// Class and slot columns of every 4x4 block pattern p (bit 4r + c: entry (r, c) kept), read as
// is (index p) or transposed (index 65536 + p): the class in the high byte (kInvalidCode when the
// block is not transposable 2:4), slot j's column in bits 2j..2j+1. Built once; only the 90
// valid patterns are ever hot in the cache.
constexpr uint16_t kInvalidCode = 0xff00;

const std::vector<uint16_t>& block_codes() {
  static const std::vector<uint16_t> codes = [] {
    std::vector<uint16_t> out(2u << 16);
    for (int transposed = 0; transposed < 2; ++transposed)
      for (uint32_t p = 0; p < (1u << 16); ++p) {
        uint32_t keep[4] = {0, 0, 0, 0};
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < 4; ++c)
            if ((p >> (4 * r + c)) & 1u) keep[transposed ? c : r] |= 1u << (transposed ? r : c);
        int cls = 0, slot_col[4];
        out[(transposed << 16) | p] =
            classify_block(keep, cls, slot_col)
                ? static_cast<uint16_t>(cls << 8 | slot_col[0] | slot_col[1] << 2 |
                                        slot_col[2] << 4 | slot_col[3] << 6)
                : kInvalidCode;
      }
    return out;
  }();
  return codes;
}

// Packs a transposable A (m.rows, m.cols) in the class layout: pattern_of(t, g) gives the kept
// bits of the block (tile t, group g) of A, or of Aᵀ when transposed; at(row, col) the value of
// A. Within each chunk of a tile the units are counting-sorted by class. Returns the largest unit
// index t * K/4 + g of a block that is not transposable 2:4, or -1.
template <class PatternOf, class At>
long long pack_classed(Sparse24Matrix& m, const PatternOf& pattern_of, bool transposed,
                       const At& at) {
  const int tiles = m.rows / 4, G = m.cols / 4, chunks = chunk_count(G);
  const uint16_t* codes = block_codes().data() + (transposed ? 1u << 16 : 0u);
  long long bad_unit = -1;
  // A tile's chunks in turn read consecutive blocks of A's rows; for Aᵀ the tiles of one chunk
  // in turn do (a band of 96 rows of A, which stays in cache).
#pragma omp parallel for schedule(static) reduction(max : bad_unit)
  for (long long i = 0; i < static_cast<long long>(tiles) * chunks; ++i) {
      const int t = static_cast<int>(transposed ? i % tiles : i / chunks);
      const int ch = static_cast<int>(transposed ? i / tiles : i % chunks);
      const int g0 = ch * kChunkGroups, g1 = std::min(G, g0 + kChunkGroups);
      uint16_t code[kChunkGroups];
      uint8_t* count = m.class_counts.data() + (static_cast<size_t>(t) * chunks + ch) * kClasses;
      std::fill(count, count + kClasses, uint8_t{0});
      for (int g = g0; g < g1; ++g) {
        code[g - g0] = codes[pattern_of(t, g)];
        if (code[g - g0] == kInvalidCode)
          bad_unit = std::max(bad_unit, static_cast<long long>(t) * G + g);
        else
          ++count[code[g - g0] >> 8];
      }
      size_t next[kClasses];  // unit index of the next block of each class
      next[0] = static_cast<size_t>(t) * G + g0;
      for (int c = 1; c < kClasses; ++c) next[c] = next[c - 1] + count[c - 1];
      for (int g = g0; g < g1; ++g) {
        const int cls = code[g - g0] >> 8;
        if (cls >= kClasses) continue;
        const sparse24_detail::SlotRows& rows = kClassRows[cls];
        const size_t u = next[cls]++;
        for (int j = 0; j < 4; ++j) {
          const int col = 4 * g + ((code[g - g0] >> (2 * j)) & 3);
          m.values[u * 8 + 2 * j] = at(4 * t + rows.a[j], col);
          m.values[u * 8 + 2 * j + 1] = at(4 * t + rows.b[j], col);
          m.offsets[u * 4 + j] = static_cast<uint16_t>((col - 4 * g0) * kPanelRowBytes);
        }
      }
    }
  return bad_unit;
}

// ---- transposes (8x8 AVX blocks, scalar edges) ----

// Transposes the 8x8 block in v in place: v[j][i] <- v[i][j].
inline void transpose8x8(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * i + h], b = t[4 * i + 2 + h];
      u[4 * i + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    v[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// dst (cols, rows) = (or += when Accumulate) src (rows, cols)ᵀ + col_bias (rows) or null.
// The outer loop runs over bands of 8 dst rows, so the dst rows are written as streams: dst
// strides are often multiples of 4 KiB, and scattering across many dst rows at once would thrash
// one L1 set.
template <bool Accumulate>
void transpose_into(float* dst, size_t dst_ld, const float* src, size_t src_ld, int rows, int cols,
                    const float* col_bias) {
  const int rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int j = 0; j < cols8; j += 8) {
    for (int i = 0; i < rows8; i += 8) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(src + (i + r) * src_ld + j);
      transpose8x8(v);
      const __m256 bias = col_bias ? _mm256_loadu_ps(col_bias + i) : _mm256_setzero_ps();
      for (int c = 0; c < 8; ++c) {
        float* d = dst + (j + c) * dst_ld + i;
        __m256 x = _mm256_add_ps(v[c], bias);
        if constexpr (Accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(d));
        _mm256_storeu_ps(d, x);
      }
    }
  }
  auto scalar = [&](int i, int j) {
    float x = src[i * src_ld + j] + (col_bias ? col_bias[i] : 0.0f);
    float& d = dst[j * dst_ld + i];
    d = Accumulate ? d + x : x;
  };
  for (int j = cols8; j < cols; ++j)
    for (int i = 0; i < rows; ++i) scalar(i, j);
  for (int j = 0; j < cols8; ++j)
    for (int i = rows8; i < rows; ++i) scalar(i, j);
}

// ---- driver ----

// Scratch of one thread, grown on demand and kept between calls: its input panel P (K, NR) and
// the outᵀ tile C (R, NR) it accumulates.
struct Scratch {
  Buffer<float> panel, c;
  static float* ensure(Buffer<float>& b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
  }
};

// out (N,R) = (or += when accumulate) inp (N,K) · S(A)ᵀ + bias (R) or null.
// Threads take whole panels of NR input rows dynamically: no barriers, and a thread slowed down
// by other load on a shared machine simply takes fewer panels. Each output element is computed
// by one thread in a fixed order, so results do not depend on the thread count.
void sparse24_product(float* out, const float* inp, const Sparse24Matrix& A, const float* bias,
                      int N, bool accumulate) {
  const IsaKernel& isa = active_kernel();
  const sparse24_detail::ChunkKernel kernel = A.classed ? isa.classed : isa.general;
  const int R = A.rows, K = A.cols, G = K / 4, tiles = R / 4;
  constexpr int NR = kPanelWidth;
  const int panels = (N + NR - 1) / NR;
  if (N <= 0 || R == 0) return;

#pragma omp parallel
  {
    static thread_local Scratch scratch;
    float* P = Scratch::ensure(scratch.panel, static_cast<size_t>(K) * NR);
    float* C = Scratch::ensure(scratch.c, static_cast<size_t>(R) * NR);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < panels; ++p) {
      const int n0 = p * NR, rows = std::min(NR, N - n0);
      transpose_into<false>(P, NR, inp + static_cast<size_t>(n0) * K, K, rows, K, nullptr);
      if (rows < NR)
        for (int k = 0; k < K; ++k)
          std::fill(P + static_cast<size_t>(k) * NR + rows, P + static_cast<size_t>(k + 1) * NR, 0.0f);
      for (int g0 = 0; g0 < G; g0 += kChunkGroups)
        kernel(ChunkArgs{C, P + static_cast<size_t>(4) * g0 * NR, A.values.data(), A.offsets.data(),
                         A.class_counts.data(), G, 0, tiles, g0, std::min(G, g0 + kChunkGroups),
                         g0 == 0});
      float* dst = out + static_cast<size_t>(n0) * R;
      if (accumulate)
        transpose_into<true>(dst, R, C, NR, R, rows, bias);
      else
        transpose_into<false>(dst, R, C, NR, R, rows, bias);
    }
  }
}

void check_packed(const Sparse24Weight& w, const char* what) {
  FRUGAL_CHECK(w.OC > 0 && w.w.rows == w.OC, "{}: the Sparse24Weight is not packed; call "
               "sparse24_pack first", what);
}

}  // namespace

void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable) {
  FRUGAL_CHECK(OC > 0 && IC > 0 && OC % 4 == 0 && IC % 4 == 0,
               "2:4 packing needs a weight with both dimensions positive and divisible by 4, got "
               "({}, {}); keep this layer dense",
               OC, IC);
  out.OC = OC;
  out.IC = IC;
  const int GO = OC / 4, GI = IC / 4;
  // kept bits of mask row `row`, columns col..col+3
  auto row_bits = [&](int row, int col) {
    const uint8_t* m = mask + static_cast<size_t>(row) * IC + col;
    return uint32_t{m[0] != 0} | uint32_t{m[1] != 0} << 1 | uint32_t{m[2] != 0} << 2 |
           uint32_t{m[3] != 0} << 3;
  };
  long long bad_unit = -1;  // W block (bad_unit / GI, bad_unit % GI)
  if (transposable) {
    resize_matrix(out.w, OC, IC, true);
    resize_matrix(out.wt, IC, OC, true);
    // kept bits of the W block at rows 4*bo.., columns 4*bi.. (bit 4r + c: entry (r, c))
    auto w_pattern = [&](int bo, int bi) {
      return row_bits(4 * bo, 4 * bi) | row_bits(4 * bo + 1, 4 * bi) << 4 |
             row_bits(4 * bo + 2, 4 * bi) << 8 | row_bits(4 * bo + 3, 4 * bi) << 12;
    };
    auto wt_pattern = [&](int t, int g) { return w_pattern(g, t); };  // Wᵀ block (t, g)
    auto w_at = [&](int r, int c) { return W[static_cast<size_t>(r) * IC + c]; };
    auto wt_at = [&](int r, int c) { return w_at(c, r); };
    bad_unit = pack_classed(out.w, w_pattern, false, w_at);
    if (bad_unit < 0) pack_classed(out.wt, wt_pattern, true, wt_at);  // Wᵀ blocks are then valid too
  } else {
    resize_matrix(out.w, OC, IC, false);
    out.wt = Sparse24Matrix{};
#pragma omp parallel for schedule(static) reduction(max : bad_unit)
    for (int bo = 0; bo < GO; ++bo)
      for (int bi = 0; bi < GI; ++bi) {
        const size_t origin = static_cast<size_t>(4 * bo) * IC + 4 * bi;
        auto w_at = [&](int r, int c) { return W[origin + static_cast<size_t>(r) * IC + c]; };
        uint32_t rows[4];
        for (int r = 0; r < 4; ++r) rows[r] = row_bits(4 * bo + r, 4 * bi);
        const size_t unit = static_cast<size_t>(bo) * GI + bi;
        if (!pack_unit(out.w.values.data() + unit * 8, out.w.offsets.data() + unit * 8, rows, w_at))
          bad_unit = std::max(bad_unit, static_cast<long long>(unit));
      }
  }
  if (bad_unit >= 0) {
    out.OC = 0;
    fail("2:4 packing: the mask block at rows {}.., columns {}.. does not keep exactly two entries "
         "in every row{}; build the mask with sparse24::{}", 4 * (bad_unit / GI), 4 * (bad_unit % GI),
         transposable ? " and column" : "", transposable ? "transposable_mask_24" : "row_mask_24");
  }
}

void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N) {
  check_packed(weight, "sparse24_matmul_forward");
  sparse24_product(out, inp, weight.w, bias, N, false);
}

void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate) {
  check_packed(weight, "sparse24_matmul_backward_input");
  FRUGAL_CHECK(weight.wt.rows == weight.IC, "sparse24_matmul_backward_input: the weight was packed "
               "row-only (transposable = false); use a transposable mask or a dense input gradient");
  sparse24_product(dinp, dout, weight.wt, nullptr, N, accumulate);
}

Sparse24Isa sparse24_set_isa(Sparse24Isa isa) {
  FRUGAL_CHECK(isa != Sparse24Isa::Avx512 || cpu_has_avx512(),
               "the AVX-512 2:4 kernel was requested but this CPU has no AVX-512F; use Auto or Avx2");
  g_isa.store(isa);
  return resolve(isa);
}

Sparse24Isa sparse24_active_isa() { return resolve(g_isa.load()); }

const char* sparse24_isa_name(Sparse24Isa isa) {
  switch (isa) {
    case Sparse24Isa::Avx2: return "avx2";
    case Sparse24Isa::Avx512: return "avx512";
    default: return "auto";
  }
}

}  // namespace frugal::kernels
