// Internal to the 2:4 CPU kernels: the register-blocked micro-kernel, written once over a small
// vector-traits type and instantiated per instruction set (sparse24_avx2.cpp, sparse24_avx512.cpp).
//
// It computes a (4 rows × NR columns) tile of outᵀ: the rows are 4 rows of the sparse matrix A,
// the NR columns are NR rows of the dense input, packed transposed into a panel P (K, NR). For each
// kept weight (value a, column k) it broadcasts a and FMAs the contiguous row P[k, 0..NR) into
// the tile: the 2:4 index is resolved on the weight side as an address offset, never a gather.
#pragma once
#include <cstddef>
#include <cstdint>

namespace frugal::kernels::sparse24_detail {

// One instruction set's micro-kernel: tiles [t0,t1) of C (R, kPanelWidth) += or = S(A) rows ·
// panel chunk; the chunk covers groups [g0,g1) of A's columns, xchunk = P + 4*g0*kPanelWidth.
using ChunkKernel = void (*)(float* C, const float* xchunk, const float* values,
                             const uint16_t* offsets, int groups, int t0, int t1, int g0, int g1,
                             bool overwrite);

// Panel width NR (dense input rows per panel) shared by all instruction sets, so the packed
// offsets (column-in-group × panel row bytes) do not depend on the instruction set.
constexpr int kPanelWidth = 96;
constexpr int kPanelRowBytes = kPanelWidth * 4;

struct IsaKernel {
  int chunk_groups;  // groups of 4 columns per cache chunk (the chunk of P stays in L1)
  ChunkKernel chunk;
};

const IsaKernel& avx2_kernel();
const IsaKernel& avx512_kernel();

// V provides: reg, kLanes, zero(), load(p), store(p, v), bcast(p), fma(a, b, c) = a*b + c.
// The panel's kPanelWidth columns are covered in strips of NV vectors.
template <class V, int NV>
void chunk_kernel(float* C, const float* xchunk, const float* values, const uint16_t* offsets,
                  int groups, int t0, int t1, int g0, int g1, bool overwrite) {
  constexpr int NR = kPanelWidth, kStrip = V::kLanes * NV;
  static_assert(NR % kStrip == 0, "the strip width must divide the panel width");
  for (int t = t0; t < t1; ++t)
    for (int strip = 0; strip < NR; strip += kStrip) {
    typename V::reg acc[4][NV];
    float* c = C + static_cast<size_t>(t) * 4 * NR + strip;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        acc[r][v] = overwrite ? V::zero() : V::load(c + r * NR + v * V::kLanes);
    const size_t unit = static_cast<size_t>(t) * groups + g0;
    const float* a = values + unit * 8;
    const uint16_t* off = offsets + unit * 8;
    const char* xg = reinterpret_cast<const char*>(xchunk + strip);
    for (int g = g0; g < g1; ++g, a += 8, off += 8, xg += 4 * kPanelRowBytes) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const float* x0 = reinterpret_cast<const float*>(xg + off[2 * r]);
        const float* x1 = reinterpret_cast<const float*>(xg + off[2 * r + 1]);
        // Materialise the row pointers so the FMAs address [pointer + displacement]: an indexed
        // memory operand would be un-laminated into two uops and halve the issue rate.
        __asm__("" : "+r"(x0), "+r"(x1));
        const typename V::reg a0 = V::bcast(a + 2 * r), a1 = V::bcast(a + 2 * r + 1);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(a0, V::load(x0 + v * V::kLanes), acc[r][v]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(a1, V::load(x1 + v * V::kLanes), acc[r][v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) V::store(c + r * NR + v * V::kLanes, acc[r][v]);
    }
}

}  // namespace frugal::kernels::sparse24_detail
