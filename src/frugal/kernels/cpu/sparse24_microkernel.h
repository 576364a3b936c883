// Internal to the 2:4 CPU kernels: the register-blocked micro-kernels, written once over a small
// vector-traits type and instantiated per instruction set (sparse24_avx2.cpp, sparse24_avx512.cpp).
//
// They compute a (4 rows × NR columns) tile of outᵀ: the rows are 4 rows of the sparse matrix A,
// the NR columns are NR rows of the dense input, packed transposed into a panel P (K, NR). For each
// kept weight (value a, column k) they broadcast a and FMA the contiguous row P[k, 0..NR) into
// the tile: the 2:4 index is resolved on the weight side as an address offset, never a gather.
//
// Transposable packings (every 4x4 block keeps two entries per row and per column) use the
// class kernel: each block column is read by exactly two of the four tile rows, so it loads the
// panel row once and feeds two FMAs. Which two rows depends on the block's row structure, one of
// six classes (below); the columns are free (they are address offsets). Blocks are sorted by
// class inside each chunk at pack time, so the kernel runs six branch-free loops per chunk.
// Row-only packings use the general kernel: one panel-row load per kept value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace frugal::kernels::sparse24_detail {

// Panel width NR (dense input rows per panel) and chunk length (groups of 4 columns of A whose
// panel rows stay in L1: 24 groups = 36 KiB) shared by all instruction sets, so the packed
// offsets and the class order do not depend on the instruction set.
constexpr int kPanelWidth = 96;
constexpr int kPanelRowBytes = kPanelWidth * 4;
constexpr int kChunkGroups = 24;

// Row structure of a transposable 4x4 block: slot j (a block column, placed by its offset) is
// read by rows a[j] and b[j]. Classes 0-2: the rows and columns form one 8-cycle, visiting the
// rows in the order 0-1-2-3, 0-1-3-2 or 0-2-1-3 (slot j joins the j-th and (j+1)-th row of the
// cycle); classes 3-5: two 2x2 full sub-blocks with the row pairs {01|23}, {02|13}, {03|12}.
// Every one of the 90 transposable patterns is one class with some column order.
struct SlotRows {
  int a[4], b[4];
};
constexpr int kClasses = 6;
constexpr SlotRows kClassRows[kClasses] = {
    {{0, 1, 2, 3}, {1, 2, 3, 0}}, {{0, 1, 3, 2}, {1, 3, 2, 0}}, {{0, 2, 1, 3}, {2, 1, 3, 0}},
    {{0, 0, 2, 2}, {1, 1, 3, 3}}, {{0, 0, 1, 1}, {2, 2, 3, 3}}, {{0, 0, 1, 1}, {3, 3, 2, 2}},
};

// One chunk of the panel: `groups` groups of A's columns starting at g0, xchunk = P +
// 4*g0*kPanelWidth. values/offsets/class_counts point at the chunk's first unit (units are
// stored chunk-major: tile t's units of the chunk start at unit t * groups); tiles [t0,t1) of
// C (R, kPanelWidth) are computed (= when overwrite, else +=).
struct ChunkArgs {
  float* C;
  const float* xchunk;
  const float* values;
  const uint16_t* offsets;
  const uint8_t* class_counts;
  int groups, t0, t1;
  bool overwrite;
};
using ChunkKernel = void (*)(const ChunkArgs& args);

// dst (cols, rows) = (or += when accumulate) src (rows, cols)ᵀ + col_bias (rows) or null.
struct TransposeArgs {
  float* dst;
  size_t dst_ld;
  const float* src;
  size_t src_ld;
  int rows, cols;
  const float* col_bias;
  bool src_bands, accumulate;
};
using BlockTranspose = void (*)(const TransposeArgs& args);

struct IsaKernel {
  ChunkKernel general;  // row-only packing: 8 values, 8 offsets per unit
  ChunkKernel classed;  // transposable packing: 8 values, 4 slot offsets per unit, class-sorted
  // The transpose of the whole blocks of transpose_block x transpose_block (rows and cols of the
  // args must be multiples of it); the driver does the edges with narrower ones.
  BlockTranspose transpose;
  int transpose_block;
};

const IsaKernel& avx2_kernel();
const IsaKernel& avx512_kernel();

// The whole kLanes x kLanes blocks of a transpose (TransposeArgs), each transposed in registers by
// BlockT(reg[kLanes]) (afterwards reg c holds column c). The blocks are visited in bands of src
// rows when src_bands (the reads stream: an input panel read column by column would touch 96
// cache lines of memory per step, measured 2.5x slower), else in bands of dst rows (the writes
// stream: dst strides are often multiples of 4 KiB, and scattering across many dst rows at once
// would thrash one L1 set).
template <class V, void (*BlockT)(typename V::reg*), bool Accumulate>
void transpose_blocks(const TransposeArgs& a) {
  constexpr int B = V::kLanes;
  auto block = [&](int i, int j) {
    typename V::reg v[B];
    for (int r = 0; r < B; ++r) v[r] = V::load(a.src + (i + r) * a.src_ld + j);
    BlockT(v);
    const typename V::reg bias = a.col_bias ? V::load(a.col_bias + i) : V::zero();
    for (int c = 0; c < B; ++c) {
      float* d = a.dst + (j + c) * a.dst_ld + i;
      typename V::reg x = V::add(v[c], bias);
      if constexpr (Accumulate) x = V::add(x, V::load(d));
      V::store(d, x);
    }
  };
  if (a.src_bands) {
    for (int i = 0; i < a.rows; i += B)
      for (int j = 0; j < a.cols; j += B) block(i, j);
  } else {
    for (int j = 0; j < a.cols; j += B)
      for (int i = 0; i < a.rows; i += B) block(i, j);
  }
}

template <class V, void (*BlockT)(typename V::reg*)>
void transpose_whole_blocks(const TransposeArgs& a) {
  if (a.accumulate)
    transpose_blocks<V, BlockT, true>(a);
  else
    transpose_blocks<V, BlockT, false>(a);
}

// V provides: reg, kLanes, zero(), load(p), store(p, v), bcast(p), add(a, b), fma(a, b, c) = a*b + c.
// The panel's kPanelWidth columns are covered in strips of NV vectors; Body(acc, xg, unit)
// adds the tile's units of one chunk for the strip starting at byte pointer xg.
template <class V, int NV, class Body>
inline void for_each_strip(const ChunkArgs& s, Body&& body) {
  constexpr int NR = kPanelWidth, kStrip = V::kLanes * NV;
  static_assert(NR % kStrip == 0, "the strip width must divide the panel width");
  for (int t = s.t0; t < s.t1; ++t)
    for (int strip = 0; strip < NR; strip += kStrip) {
      typename V::reg acc[4][NV];
      float* c = s.C + static_cast<size_t>(t) * 4 * NR + strip;
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v)
          acc[r][v] = s.overwrite ? V::zero() : V::load(c + r * NR + v * V::kLanes);
      body(acc, reinterpret_cast<const char*>(s.xchunk + strip), t);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) V::store(c + r * NR + v * V::kLanes, acc[r][v]);
    }
}

// Materialises a row pointer so the FMAs address [pointer + displacement]: an indexed memory
// operand would be un-laminated into two uops and halve the issue rate.
namespace {  // internal: each instruction set's file compiles its own copy
inline const float* row_at(const char* base, unsigned offset) {
  const float* x = reinterpret_cast<const float*>(base + offset);
  __asm__("" : "+r"(x));
  return x;
}
}  // namespace

// General kernel: per kept value 1 broadcast, NV loads, NV FMAs (memory operands).
template <class V, int NV>
void general_chunk_kernel(const ChunkArgs& s) {
  for_each_strip<V, NV>(s, [&](typename V::reg(&acc)[4][NV], const char* xg, int t) {
    const size_t unit = static_cast<size_t>(t) * s.groups;
    const float* a = s.values + unit * 8;
    const uint16_t* off = s.offsets + unit * 8;
    for (int g = 0; g < s.groups; ++g, a += 8, off += 8) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const float* x0 = row_at(xg, off[2 * r]);
        const float* x1 = row_at(xg, off[2 * r + 1]);
        const typename V::reg a0 = V::bcast(a + 2 * r), a1 = V::bcast(a + 2 * r + 1);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(a0, V::load(x0 + v * V::kLanes), acc[r][v]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(a1, V::load(x1 + v * V::kLanes), acc[r][v]);
      }
    }
  });
}

// n units of class Cls: per slot 2 broadcasts, NV loads, 2·NV FMAs. Offsets are relative to the
// chunk start (they include the group's position in the chunk). (GCC folds the panel vector into
// one FMA as a memory operand and reloads it for the other; pinning it in a register with an
// empty asm was 1.25x faster with everything in L1 but made no difference in the products, which
// are bound by the memory side. For the same reason the row address is left indexed here:
// row_at measured 1-2% slower in this loop.)
template <class V, int NV, int Cls>
inline void class_run(typename V::reg (&acc)[4][NV], const char* xg, const float*& a,
                      const uint16_t*& off, int n) {
  constexpr SlotRows rows = kClassRows[Cls];
  for (int i = 0; i < n; ++i, a += 8, off += 4) {
    [&]<int... J>(std::integer_sequence<int, J...>) {
      (
          [&] {
            const float* x = reinterpret_cast<const float*>(xg + off[J]);
            const typename V::reg va = V::bcast(a + 2 * J), vb = V::bcast(a + 2 * J + 1);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
              const typename V::reg xv = V::load(x + v * V::kLanes);
              acc[rows.a[J]][v] = V::fma(va, xv, acc[rows.a[J]][v]);
              acc[rows.b[J]][v] = V::fma(vb, xv, acc[rows.b[J]][v]);
            }
          }(),
          ...);
    }(std::make_integer_sequence<int, 4>{});
  }
}

template <class V, int NV>
void class_chunk_kernel(const ChunkArgs& s) {
  for_each_strip<V, NV>(s, [&](typename V::reg(&acc)[4][NV], const char* xg, int t) {
    const size_t unit = static_cast<size_t>(t) * s.groups;
    const float* a = s.values + unit * 8;
    const uint16_t* off = s.offsets + unit * 4;
    const uint8_t* n = s.class_counts + static_cast<size_t>(t) * kClasses;
    [&]<int... Cls>(std::integer_sequence<int, Cls...>) {
      (class_run<V, NV, Cls>(acc, xg, a, off, n[Cls]), ...);
    }(std::make_integer_sequence<int, kClasses>{});
  });
}

}  // namespace frugal::kernels::sparse24_detail
