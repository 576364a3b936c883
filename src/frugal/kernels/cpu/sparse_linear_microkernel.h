// Internal to the unstructured sparse linear kernels (sparse_linear.cpp): the two inner loops,
// written once over a small vector-traits type V and instantiated per instruction set
// (sparse_linear_avx2.cpp, sparse_linear_avx512.cpp).
//
// Both run on feature-major panels of kPanel tokens: a dense operand X (kPanel, K) transposed to
// P (K, kPanel), so that row k of P is the contiguous kPanel values of feature k. A sparse row's
// entry (column k, value a) is stored with the byte offset k · kPanelRowBytes of P's row k: the
// index is resolved as an address, never a gather.
//   product: C (rows, kPanel) = A · P, per entry one broadcast and kPanel/kLanes FMAs into the
//            row's register accumulators (the forward and the input gradient).
//   dots:    sums[j] += Q[row(j)] · P[k(j)] over the panel's tokens, one dot product per entry
//            (the weight gradient at the active positions), reduced kLanes entries at a time.
// V provides: reg, kLanes, zero(), load(p), store(p, v), bcast(p), add(a, b), mul(a, b),
// fma(a, b, c) = a·b + c, and reduce_add(buf, out): out[i] += Σ_l buf[i·kLanes + l], i < kLanes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace frugal::kernels::sparse_linear_detail {

// Tokens per panel, for every instruction set (the packed offsets depend on it).
constexpr int kPanel = 64;
constexpr int kPanelRowBytes = kPanel * 4;
// Columns of A per chunk: every row of A takes its entries of one chunk before the next, so the
// kChunk panel rows a chunk reads (48 KiB) stay close (L1 and L2) instead of the whole panel (K up
// to 3072 rows, 768 KiB). Measured (1 thread, forward and weight gradient, C = 384 and 768): 192
// up to 10% faster than 128, 128 up to 15% faster than 96, 64 12-24% slower than 96; 384 no
// better than 192, and no chunks 6-30% slower at K ≥ 768.
constexpr int kChunk = 192;

// A sparse matrix A (R, K) by rows, cut into column chunks of kChunk: the entries of row r in
// chunk c are [ptr[c·R + r], ptr[c·R + r + 1]) (chunk-major, so the pointer of chunk c is
// ptr + c·R), each a byte offset into the panel (column × kPanelRowBytes) and a value.
struct SparseRows {
  const uint32_t* ptr;
  const uint32_t* offset;
  const float* values;
};

// C (r1 - r0, kPanel) = (or += unless overwrite) rows r0..r1 of A · P (K, kPanel), A's entries
// of one chunk (A.ptr = the chunk's pointer).
struct ProductArgs {
  float* C;
  const float* P;
  SparseRows A;
  int r0, r1;
  bool overwrite;
};
// sums[j] += Q[r] · P[k] for every entry j (row r, column k) of rows r0..r1 of A (its values
// unused; A.ptr = one chunk's pointer); Q (R, kPanel), P (K, kPanel), sums indexed like A's entries.
struct DotArgs {
  float* sums;
  const float* Q;
  const float* P;
  SparseRows A;
  int r0, r1;
};

struct IsaKernel {
  void (*product)(const ProductArgs& args);
  void (*dots)(const DotArgs& args);
};

const IsaKernel& avx2_kernel();
const IsaKernel& avx512_kernel();

// Materialises a panel-row pointer so the loads address [pointer + displacement]: an indexed
// memory operand would be un-laminated into two uops.
namespace {  // internal: each instruction set's file compiles its own copy
inline const float* panel_row(const float* P, uint32_t offset) {
  const float* x = reinterpret_cast<const float*>(reinterpret_cast<const char*>(P) + offset);
  __asm__("" : "+r"(x));
  return x;
}
}  // namespace

// S accumulator sets of NV = kPanel / kLanes vectors: entry j of a row feeds set j % S, so S·NV
// independent FMA chains hide the FMA latency.
template <class V, int S>
void product_kernel(const ProductArgs& s) {
  constexpr int NV = kPanel / V::kLanes;
  for (int r = s.r0; r < s.r1; ++r) {
    float* c = s.C + static_cast<size_t>(r - s.r0) * kPanel;
    typename V::reg acc[S][NV];
    for (int k = 0; k < S; ++k)
      for (int v = 0; v < NV; ++v)
        acc[k][v] = k == 0 && !s.overwrite ? V::load(c + v * V::kLanes) : V::zero();
    const uint32_t end = s.A.ptr[r + 1];
    uint32_t j = s.A.ptr[r];
    for (; j + S <= end; j += S)
#pragma GCC unroll 4
      for (int k = 0; k < S; ++k) {
        const float* x = panel_row(s.P, s.A.offset[j + k]);
        const typename V::reg a = V::bcast(s.A.values + j + k);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[k][v] = V::fma(a, V::load(x + v * V::kLanes), acc[k][v]);
      }
    for (; j < end; ++j) {
      const float* x = panel_row(s.P, s.A.offset[j]);
      const typename V::reg a = V::bcast(s.A.values + j);
      for (int v = 0; v < NV; ++v) acc[0][v] = V::fma(a, V::load(x + v * V::kLanes), acc[0][v]);
    }
    for (int v = 0; v < NV; ++v) {
      typename V::reg sum = acc[0][v];
      for (int k = 1; k < S; ++k) sum = V::add(sum, acc[k][v]);
      V::store(c + v * V::kLanes, sum);
    }
  }
}

// Each entry's kLanes partial sums go to a kLanes x kLanes buffer in L1; every kLanes entries (the
// entries of consecutive rows run on, so short rows fill batches too) reduce_add folds them.
template <class V>
void dots_kernel(const DotArgs& s) {
  constexpr int NV = kPanel / V::kLanes, L = V::kLanes;
  static_assert(NV % 2 == 0, "the dot product runs two chains over the panel's vectors");
  alignas(64) float buf[L * L];
  int filled = 0;
  for (int r = s.r0; r < s.r1; ++r) {
    typename V::reg q[NV];
    for (int v = 0; v < NV; ++v) q[v] = V::load(s.Q + static_cast<size_t>(r) * kPanel + v * L);
    for (uint32_t j = s.A.ptr[r]; j < s.A.ptr[r + 1]; ++j) {
      const float* x = panel_row(s.P, s.A.offset[j]);
      typename V::reg even = V::mul(q[0], V::load(x)), odd = V::mul(q[1], V::load(x + L));
#pragma GCC unroll 8
      for (int v = 2; v < NV; v += 2) {
        even = V::fma(q[v], V::load(x + v * L), even);
        odd = V::fma(q[v + 1], V::load(x + (v + 1) * L), odd);
      }
      V::store(buf + filled * L, V::add(even, odd));
      if (++filled == L) {
        V::reduce_add(buf, s.sums + (j + 1 - L));
        filled = 0;
      }
    }
  }
  if (filled > 0) {  // the last partial batch
    const uint32_t start = s.A.ptr[s.r1] - filled;
    alignas(64) float tail[L] = {};
    for (int i = filled; i < L; ++i) V::store(buf + i * L, V::zero());
    V::reduce_add(buf, tail);
    for (int i = 0; i < filled; ++i) s.sums[start + i] += tail[i];
  }
}

}  // namespace frugal::kernels::sparse_linear_detail
