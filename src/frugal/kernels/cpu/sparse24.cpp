// 2:4 sparse linear products on CPU: packing of W and Wᵀ, the panel driver (OpenMP) and the
// family's kernel tables of the AVX2 and AVX-512 paths; the transposes around the micro-kernel are in panel_transpose.cpp.
#include "frugal/kernels/cpu/sparse24.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/panel_transpose.h"
#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels {

void Sparse24WeightDeleter::operator()(Sparse24Weight* weight) const { delete weight; }

Sparse24Packed sparse24_new_weight() { return Sparse24Packed(new Sparse24Weight); }

}  // namespace frugal::kernels

namespace frugal::kernels::cpu {
namespace {

using sparse24_detail::ChunkArgs;
using sparse24_detail::IsaKernel;
using sparse24_detail::kChunkGroups;
using sparse24_detail::kClasses;
using sparse24_detail::kClassRows;
using sparse24_detail::kPanelRowBytes;
using sparse24_detail::kPanelWidth;

// ---- packing ----

int chunk_count(int groups) { return (groups + kChunkGroups - 1) / kChunkGroups; }

// Chunk ch covers groups [g0, g0 + L); the unit of tile t at position i is first + t * L + i.
struct ChunkSpan {
  int g0, L;
  size_t first;
};
ChunkSpan chunk_span(int ch, int groups, int tiles) {
  const int g0 = ch * kChunkGroups;
  return {g0, std::min(kChunkGroups, groups - g0), static_cast<size_t>(g0) * tiles};
}

void resize_matrix(Sparse24Matrix& m, int rows, int cols, bool classed, bool transposed) {
  const size_t units = static_cast<size_t>(rows / 4) * (cols / 4);
  const size_t offsets = units * (classed ? 4 : 8);
  const size_t counts =
      classed ? static_cast<size_t>(rows / 4) * chunk_count(cols / 4) * kClasses : 0;
  if (m.values.size() != units * 8) m.values.resize(units * 8);
  if (m.offsets.size() != offsets) m.offsets.resize(offsets);
  if (m.class_counts.size() != counts) m.class_counts.resize(counts);
  if (m.sources.size() != units) m.sources.resize(units);
  m.rows = rows;
  m.cols = cols;
  m.classed = classed;
  m.transposed = transposed;
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

// Class and slot columns of every 4x4 block pattern p (bit 4r + c: entry (r, c) kept): the class
// in the high byte (kInvalidCode when the block is not transposable 2:4), slot j's column in bits
// 2j..2j+1. Built once.
constexpr uint16_t kInvalidCode = 0xff00;

const std::vector<uint16_t>& block_codes() {
  static const std::vector<uint16_t> codes = [] {
    std::vector<uint16_t> out(1u << 16);
    for (uint32_t p = 0; p < (1u << 16); ++p) {
      const uint32_t keep[4] = {p & 15u, (p >> 4) & 15u, (p >> 8) & 15u, p >> 12};
      int cls = 0, slot_col[4];
      out[p] = classify_block(keep, cls, slot_col)
                   ? static_cast<uint16_t>(cls << 8 | slot_col[0] | slot_col[1] << 2 |
                                           slot_col[2] << 4 | slot_col[3] << 6)
                   : kInvalidCode;
    }
    return out;
  }();
  return codes;
}

// The 4x4 bit pattern transposed: bit 4r + c moves to bit 4c + r.
uint32_t transpose_pattern(uint32_t p) {
  uint32_t t = 0;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) t |= ((p >> (4 * r + c)) & 1u) << (4 * c + r);
  return t;
}

// Builds the layout of m (offsets, class counts, sources; not the values) from pattern_of(t, g),
// the kept bits of A's block (tile t, group g) (bit 4r + c: A entry (r, c)). Classed: within
// each chunk of a tile the units are counting-sorted by class. Returns the largest t * K/4 + g
// of a block that is not 2:4 (classed: in rows and columns; row-only: in rows), or -1.
template <class PatternOf>
long long build_layout(Sparse24Matrix& m, const PatternOf& pattern_of) {
  const int tiles = m.rows / 4, G = m.cols / 4, chunks = chunk_count(G);
  const uint16_t* codes = block_codes().data();
  const bool transposed = m.transposed;
  // entry of the W block that A's entry (r, c) of the same block is
  auto entry = [transposed](int r, int c) {
    return static_cast<uint64_t>(transposed ? 4 * c + r : 4 * r + c);
  };
  long long bad_unit = -1;
#pragma omp parallel for schedule(static) reduction(max : bad_unit)
  for (long long i = 0; i < static_cast<long long>(chunks) * tiles; ++i) {
    const int ch = static_cast<int>(i / tiles), t = static_cast<int>(i % tiles);
    const ChunkSpan span = chunk_span(ch, G, tiles);
    const size_t first = span.first + static_cast<size_t>(t) * span.L;
    auto mark_bad = [&](int j) {
      bad_unit = std::max(bad_unit, static_cast<long long>(t) * G + span.g0 + j);
    };
    if (!m.classed) {
      for (int j = 0; j < span.L; ++j) {
        const uint32_t p = pattern_of(t, span.g0 + j);
        const size_t u = first + j;
        uint64_t src = static_cast<uint64_t>(j) << 32;
        for (int r = 0; r < 4; ++r) {
          const uint32_t bits = (p >> (4 * r)) & 15u;
          if (__builtin_popcount(bits) != 2) mark_bad(j);
          const int c0 = __builtin_ctz(bits | 16u) & 3, c1 = __builtin_ctz((bits & (bits - 1)) | 16u) & 3;
          m.offsets[u * 8 + 2 * r] = static_cast<uint16_t>((4 * j + c0) * kPanelRowBytes);
          m.offsets[u * 8 + 2 * r + 1] = static_cast<uint16_t>((4 * j + c1) * kPanelRowBytes);
          src |= entry(r, c0) << (8 * r) | entry(r, c1) << (8 * r + 4);
        }
        m.sources[u] = src;
      }
      continue;
    }
    uint16_t code[kChunkGroups];
    uint8_t* count = m.class_counts.data() + static_cast<size_t>(i) * kClasses;
    std::fill(count, count + kClasses, uint8_t{0});
    for (int j = 0; j < span.L; ++j) {
      code[j] = codes[pattern_of(t, span.g0 + j)];
      if (code[j] == kInvalidCode)
        mark_bad(j);
      else
        ++count[code[j] >> 8];
    }
    size_t next[kClasses];  // unit index of the next block of each class
    next[0] = first;
    for (int c = 1; c < kClasses; ++c) next[c] = next[c - 1] + count[c - 1];
    for (int j = 0; j < span.L; ++j) {
      const int cls = code[j] >> 8;
      if (cls >= kClasses) continue;
      const sparse24_detail::SlotRows& rows = kClassRows[cls];
      const size_t u = next[cls]++;
      uint64_t src = static_cast<uint64_t>(j) << 32;
      for (int k = 0; k < 4; ++k) {
        const int col = (code[j] >> (2 * k)) & 3;
        m.offsets[u * 4 + k] = static_cast<uint16_t>((4 * j + col) * kPanelRowBytes);
        src |= entry(rows.a[k], col) << (8 * k) | entry(rows.b[k], col) << (8 * k + 4);
      }
      m.sources[u] = src;
    }
  }
  return bad_unit;
}

// Gathers m's values from W (OC, IC) through the sources of its layout: per unit one 8-wide
// gather from its W block. For A = W the tiles' runs of a chunk are visited tile by tile (rows of
// W in order); for A = Wᵀ chunk by chunk (a band of 96 rows of W, which stays in cache).
void fill_values(Sparse24Matrix& m, const float* W, int IC) {
  const int tiles = m.rows / 4, G = m.cols / 4, chunks = chunk_count(G);
  const bool transposed = m.transposed;
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i stride = _mm256_set1_epi32(IC), nibble = _mm256_set1_epi32(15), three = _mm256_set1_epi32(3);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(chunks) * tiles; ++i) {
    const int ch = static_cast<int>(transposed ? i / tiles : i % chunks);
    const int t = static_cast<int>(transposed ? i % tiles : i / chunks);
    const ChunkSpan span = chunk_span(ch, G, tiles);
    const size_t first = span.first + static_cast<size_t>(t) * span.L;
    for (int j = 0; j < span.L; ++j) {
      const uint64_t src = m.sources[first + j];
      const int g = span.g0 + static_cast<int>((src >> 32) & 255u);
      const size_t row0 = 4 * static_cast<size_t>(transposed ? g : t), col0 = 4 * static_cast<size_t>(transposed ? t : g);
      const __m256i e = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(src)), shifts), nibble);
      const __m256i off = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(e, 2), stride), _mm256_and_si256(e, three));
      _mm256_storeu_ps(m.values.data() + (first + j) * 8, _mm256_i32gather_ps(W + row0 * IC + col0, off, 4));
    }
  }
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
// Threads take work items dynamically: no barriers, and a thread slowed down by other load on a
// shared machine simply takes fewer. An item is a panel of NR input rows times a range of A's
// tiles: all tiles when there are many panels; with few (N = 1024 is 11 panels, which 2 threads
// split 6:5) the tiles are cut in one range per thread so the items divide evenly, at the cost of
// transposing each input panel once per range. Each output element is computed by one thread in
// a fixed order, so results do not depend on the thread count.
void sparse24_product(float* out, const float* inp, const Sparse24Matrix& A, const float* bias,
                      int N, bool accumulate, bool avx512) {
  const IsaKernel& isa = avx512 ? sparse24_detail::avx512_kernel() : sparse24_detail::avx2_kernel();
  const sparse24_detail::ChunkKernel kernel = A.classed ? isa.classed : isa.general;
  const int R = A.rows, K = A.cols, G = K / 4, tiles = R / 4, chunks = chunk_count(G);
  constexpr int NR = kPanelWidth;
  const int panels = (N + NR - 1) / NR;
  if (N <= 0 || R == 0) return;
  const int threads = omp_get_max_threads();
  const int ranges = panels % threads != 0 && panels < 8 * threads ? std::min(threads, tiles) : 1;

#pragma omp parallel
  {
    static thread_local Scratch scratch;
    float* P = Scratch::ensure(scratch.panel, static_cast<size_t>(K) * NR);
    float* C = Scratch::ensure(scratch.c, static_cast<size_t>(R) * NR);
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < panels * ranges; ++item) {
      const int p = item / ranges, range = item % ranges;
      const int t0 = static_cast<int>(static_cast<long long>(tiles) * range / ranges);
      const int t1 = static_cast<int>(static_cast<long long>(tiles) * (range + 1) / ranges);
      const int n0 = p * NR, rows = std::min(NR, N - n0);
      transpose_into(P, NR, inp + static_cast<size_t>(n0) * K, K, rows, K, nullptr, true, false, avx512);
      if (rows < NR)
        for (int k = 0; k < K; ++k)
          std::fill(P + static_cast<size_t>(k) * NR + rows, P + static_cast<size_t>(k + 1) * NR, 0.0f);
      for (int ch = 0; ch < chunks; ++ch) {
        const ChunkSpan span = chunk_span(ch, G, tiles);
        kernel(ChunkArgs{C, P + static_cast<size_t>(4) * span.g0 * NR, A.values.data() + span.first * 8,
                         A.offsets.data() + span.first * (A.classed ? 4 : 8),
                         A.classed ? A.class_counts.data() + static_cast<size_t>(ch) * tiles * kClasses : nullptr,
                         span.L, t0, t1, ch == 0});
      }
      // rows 4*t0.. of C are outᵀ columns 4*t0..
      float* dst = out + static_cast<size_t>(n0) * R + 4 * t0;
      const float* c = C + static_cast<size_t>(4) * t0 * NR;
      const float* b = bias ? bias + 4 * t0 : nullptr;
      transpose_into(dst, R, c, NR, 4 * (t1 - t0), rows, b, false, accumulate, avx512);
    }
  }
}

void sparse24_refresh_values(Sparse24Weight& packed, const float* W) {
  check_sparse24_packed(packed, "sparse24_refresh_values");
  fill_values(packed.w, W, packed.IC);
  if (packed.wt.rows > 0) fill_values(packed.wt, W, packed.IC);
}

void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable) {
  FRUGAL_CHECK(OC > 0 && IC > 0 && OC % 4 == 0 && IC % 4 == 0,
               "2:4 packing needs a weight with both dimensions positive and divisible by 4, got "
               "({}, {}); keep this layer dense",
               OC, IC);
  out.OC = OC;
  out.IC = IC;
  const int GI = IC / 4;
  // kept bits of mask row `row`, columns col..col+3
  auto row_bits = [&](int row, int col) {
    const uint8_t* m = mask + static_cast<size_t>(row) * IC + col;
    return uint32_t{m[0] != 0} | uint32_t{m[1] != 0} << 1 | uint32_t{m[2] != 0} << 2 |
           uint32_t{m[3] != 0} << 3;
  };
  // kept bits of the W block at rows 4*bo.., columns 4*bi.. (bit 4r + c: entry (r, c))
  auto w_pattern = [&](int bo, int bi) {
    return row_bits(4 * bo, 4 * bi) | row_bits(4 * bo + 1, 4 * bi) << 4 |
           row_bits(4 * bo + 2, 4 * bi) << 8 | row_bits(4 * bo + 3, 4 * bi) << 12;
  };
  resize_matrix(out.w, OC, IC, transposable, false);
  // W block (bad_unit / GI, bad_unit % GI); when W's blocks are transposable 2:4, so are Wᵀ's
  const long long bad_unit = build_layout(out.w, w_pattern);
  if (transposable) {
    resize_matrix(out.wt, IC, OC, true, true);
    if (bad_unit < 0) build_layout(out.wt, [&](int t, int g) { return transpose_pattern(w_pattern(g, t)); });
  } else {
    out.wt = Sparse24Matrix{};
  }
  if (bad_unit >= 0) {
    out.OC = 0;
    fail("2:4 packing: the mask block at rows {}.., columns {}.. does not keep exactly two entries "
         "in every row{}; build the mask with sparse24::{}", 4 * (bad_unit / GI), 4 * (bad_unit % GI),
         transposable ? " and column" : "", transposable ? "transposable_mask_24" : "row_mask_24");
  }
  cpu::sparse24_refresh_values(out, W);  // qualified: ADL would also find ops.h's
}

template <bool avx512>
void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N) {
  check_sparse24_packed(weight, "sparse24_matmul_forward");
  sparse24_product(out, inp, weight.w, bias, N, false, avx512);
}

template <bool avx512>
void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate) {
  check_sparse24_transposable(weight, "sparse24_matmul_backward_input");
  sparse24_product(dinp, dout, weight.wt, nullptr, N, accumulate, avx512);
}

}  // namespace

void check_sparse24_packed(const Sparse24Weight& w, const char* what) {
  FRUGAL_CHECK(w.OC > 0 && w.w.rows == w.OC, "{}: the Sparse24Weight is not packed; call "
               "sparse24_pack first", what);
}

void check_sparse24_transposable(const Sparse24Weight& w, const char* what) {
  check_sparse24_packed(w, what);
  FRUGAL_CHECK(w.wt.rows == w.IC, "{}: the weight was packed row-only (transposable = false); use "
               "a transposable mask or a dense input gradient", what);
}

const Sparse24Kernels sparse24_avx2{&sparse24_pack, &sparse24_refresh_values,
                                    &sparse24_matmul_forward<false>,
                                    &sparse24_matmul_backward_input<false>, &mvue24_rows};
const Sparse24Kernels sparse24_avx512{&sparse24_pack, &sparse24_refresh_values,
                                      &sparse24_matmul_forward<true>,
                                      &sparse24_matmul_backward_input<true>, &mvue24_rows};

}  // namespace frugal::kernels::cpu
