// Unstructured sparse linear products on CPU: packing (rows, columns, permutation), the panel
// drivers (OpenMP) around the inner loops of sparse_linear_microkernel.h, and the family's kernel
// tables of the AVX2 and AVX-512 paths.
#include "frugal/kernels/cpu/sparse_linear.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/cpu_backend.h"
#include "frugal/kernels/cpu/panel_transpose.h"
#include "frugal/kernels/cpu/sparse_linear_microkernel.h"

namespace frugal::kernels {

void SparseLinearWeightDeleter::operator()(SparseLinearWeight* weight) const { delete weight; }

SparseLinearPacked sparse_linear_new_weight() { return SparseLinearPacked(new SparseLinearWeight); }

double sparse_linear_density(const SparseLinearWeight& packed) {
  cpu::check_sparse_linear_packed(packed, "sparse_linear_density");
  return static_cast<double>(packed.nnz) / (static_cast<double>(packed.OC) * packed.IC);
}

}  // namespace frugal::kernels

namespace frugal::kernels::cpu {
namespace {

using sparse_linear_detail::IsaKernel;
using sparse_linear_detail::kChunk;
using sparse_linear_detail::kPanel;
using sparse_linear_detail::kPanelRowBytes;
using sparse_linear_detail::SparseRows;

// Output rows per result tile: the (kRowBlock, kPanel) tile (128 KiB, in L2) takes the products
// of every chunk, then is transposed into the output. Measured (1 thread): 512 rows 1-6% faster
// than 256, 256 4-9% faster than 128.
constexpr int kRowBlock = 512;
// Token groups of the weight gradient: each sums its panels into its own copy of the entries,
// and the copies are added in group order, so the result does not depend on the thread count.
constexpr int kMaxGroups = 4;

const IsaKernel& kernel_for(bool avx512) {
  return avx512 ? sparse_linear_detail::avx512_kernel() : sparse_linear_detail::avx2_kernel();
}

// ---- layout ----

int chunks_of(int K) { return (K + kChunk - 1) / kChunk; }

// A.ptr of chunk c of a matrix with R rows.
SparseRows chunk_rows(SparseRows A, int c, int R) {
  return {A.ptr + static_cast<size_t>(c) * R, A.offset, A.values};
}

// ---- buffers ----

template <class T>
T* at_least(Buffer<T>& b, size_t n) {
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Scratch of one thread, grown on demand and kept between calls: the panels of the two dense
// operands and the result tile.
struct Scratch {
  Buffer<float> p, q, tile;
};
thread_local Scratch t_scratch;

// panel (K, kPanel) = src rows [0, rows) (rows ≤ kPanel) of a (·, K) matrix, transposed; the
// columns past `rows` are zero (the weight gradient sums over all kPanel lanes).
void load_panel(float* panel, const float* src, int K, int rows, bool avx512) {
  transpose_into(panel, kPanel, src, K, rows, K, nullptr, true, false, avx512);
  if (rows < kPanel)
    for (int k = 0; k < K; ++k)
      std::fill(panel + static_cast<size_t>(k) * kPanel + rows,
                panel + static_cast<size_t>(k + 1) * kPanel, 0.0f);
}

// out (N,R) = (or += when accumulate) inp (N,K) · Aᵀ + bias (R) or null, A (R,K) sparse by rows.
// Threads take token panels dynamically; each output element is computed by one thread in a fixed
// order, so results do not depend on the thread count.
void sparse_product(float* out, const float* inp, SparseRows A, int R, int K, const float* bias,
                    int N, bool accumulate, bool avx512) {
  if (N <= 0) return;
  const IsaKernel& isa = kernel_for(avx512);
  const int panels = (N + kPanel - 1) / kPanel, chunks = chunks_of(K);
#pragma omp parallel
  {
    float* P = at_least(t_scratch.p, static_cast<size_t>(K) * kPanel);
    float* C = at_least(t_scratch.tile, static_cast<size_t>(kRowBlock) * kPanel);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < panels; ++p) {
      const int n0 = p * kPanel, rows = std::min(kPanel, N - n0);
      load_panel(P, inp + static_cast<size_t>(n0) * K, K, rows, avx512);
      for (int r0 = 0; r0 < R; r0 += kRowBlock) {
        const int r1 = std::min(R, r0 + kRowBlock);
        for (int c = 0; c < chunks; ++c) isa.product({C, P, chunk_rows(A, c, R), r0, r1, c == 0});
        transpose_into(out + static_cast<size_t>(n0) * R + r0, R, C, kPanel, r1 - r0, rows,
                       bias ? bias + r0 : nullptr, false, accumulate, avx512);
      }
    }
  }
}

SparseRows rows_of(const SparseLinearWeight& w) {
  return {w.row_ptr.data(), w.row_offset.data(), w.row_values.data()};
}

void sparse_linear_refresh_values(SparseLinearWeight& packed, const float* W) {
  check_sparse_linear_packed(packed, "sparse_linear_refresh_values");
  const int OC = packed.OC, IC = packed.IC;
  const uint32_t* row_ptr = packed.row_ptr.data();
  const uint32_t* row_offset = packed.row_offset.data();
  float* row_values = packed.row_values.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (size_t i = 0; i < static_cast<size_t>(chunks_of(IC)) * OC; ++i) {
      const float* w = W + (i % OC) * IC;
      for (uint32_t j = row_ptr[i]; j < row_ptr[i + 1]; ++j) row_values[j] = w[row_offset[j] / kPanelRowBytes];
    }
    const uint32_t* col_source = packed.col_source.data();
    float* col_values = packed.col_values.data();
#pragma omp for schedule(static)
    for (size_t j = 0; j < packed.nnz; ++j) col_values[j] = row_values[col_source[j]];
  }
}

void sparse_linear_pack(SparseLinearWeight& out, const float* W, const uint8_t* mask, int OC,
                        int IC) {
  FRUGAL_CHECK(OC > 0 && IC > 0, "sparse linear packing needs a weight with both dimensions "
               "positive, got ({}, {})", OC, IC);
  FRUGAL_CHECK(static_cast<uint64_t>(std::max(OC, IC)) * kPanelRowBytes < (uint64_t{1} << 32) &&
                   static_cast<uint64_t>(OC) * IC < (uint64_t{1} << 32),
               "sparse linear packing: a ({}, {}) weight is too large for 32-bit entry offsets", OC, IC);
  out.OC = 0;  // unpacked until complete
  const int CI = chunks_of(IC), CO = chunks_of(OC);
  const size_t row_segments = static_cast<size_t>(CI) * OC, col_segments = static_cast<size_t>(CO) * IC;
  uint32_t* row_ptr = at_least(out.row_ptr, row_segments + 1);
  uint32_t* col_ptr = at_least(out.col_ptr, col_segments + 1);
  // W by rows: the entries of (chunk c, row o) counted at row_ptr[c·OC + o + 1], prefix-summed
  row_ptr[0] = 0;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < OC; ++o) {
    const uint8_t* m = mask + static_cast<size_t>(o) * IC;
    for (int c = 0; c < CI; ++c) {
      uint32_t count = 0;
      for (int k = c * kChunk; k < std::min(IC, (c + 1) * kChunk); ++k) count += m[k] != 0;
      row_ptr[static_cast<size_t>(c) * OC + o + 1] = count;
    }
  }
  for (size_t i = 0; i < row_segments; ++i) row_ptr[i + 1] += row_ptr[i];
  const size_t nnz = row_ptr[row_segments];
  uint32_t* row_offset = at_least(out.row_offset, nnz);
  at_least(out.row_values, nnz);
  uint32_t* col_offset = at_least(out.col_offset, nnz);
  uint32_t* col_source = at_least(out.col_source, nnz);
  at_least(out.col_values, nnz);
#pragma omp parallel for schedule(static)
  for (int o = 0; o < OC; ++o) {
    const uint8_t* m = mask + static_cast<size_t>(o) * IC;
    for (int c = 0; c < CI; ++c) {
      uint32_t j = row_ptr[static_cast<size_t>(c) * OC + o];
      for (int k = c * kChunk; k < std::min(IC, (c + 1) * kChunk); ++k)
        if (m[k]) row_offset[j++] = static_cast<uint32_t>(k) * kPanelRowBytes;
    }
  }
  // Wᵀ by rows: entry (o, k) is in segment (chunk o / kChunk, row k). Counted, prefix-summed, then
  // placed walking the row copy in order, which leaves each segment sorted by o.
  auto col_segment = [&](int o, uint32_t offset) {
    return static_cast<size_t>(o / kChunk) * IC + offset / kPanelRowBytes;
  };
  std::fill(col_ptr, col_ptr + col_segments + 1, 0u);
  for (size_t i = 0; i < row_segments; ++i)
    for (uint32_t j = row_ptr[i]; j < row_ptr[i + 1]; ++j)
      ++col_ptr[col_segment(static_cast<int>(i % OC), row_offset[j]) + 1];
  for (size_t i = 0; i < col_segments; ++i) col_ptr[i + 1] += col_ptr[i];
  std::vector<uint32_t> next(col_ptr, col_ptr + col_segments);
  for (size_t i = 0; i < row_segments; ++i) {
    const int o = static_cast<int>(i % OC);
    for (uint32_t j = row_ptr[i]; j < row_ptr[i + 1]; ++j) {
      const uint32_t pos = next[col_segment(o, row_offset[j])]++;
      col_offset[pos] = static_cast<uint32_t>(o) * kPanelRowBytes;
      col_source[pos] = j;
    }
  }
  out.OC = OC;
  out.IC = IC;
  out.nnz = nnz;
  cpu::sparse_linear_refresh_values(out, W);  // qualified: ADL would also find ops.h's
}

template <bool avx512>
void sparse_linear_forward(float* out, const float* inp, const SparseLinearWeight& weight,
                           const float* bias, int N) {
  check_sparse_linear_packed(weight, "sparse_linear_forward");
  sparse_product(out, inp, rows_of(weight), weight.OC, weight.IC, bias, N, false, avx512);
}

template <bool avx512>
void sparse_linear_backward_input(float* dinp, const float* dout, const SparseLinearWeight& weight,
                                  int N, bool accumulate) {
  check_sparse_linear_packed(weight, "sparse_linear_backward_input");
  const SparseRows wt{weight.col_ptr.data(), weight.col_offset.data(), weight.col_values.data()};
  sparse_product(dinp, dout, wt, weight.IC, weight.OC, nullptr, N, accumulate, avx512);
}

// Token panels are cut into min(4, panels) groups of consecutive panels; a thread takes a whole
// group, transposes each of its panels of inp and dout, and adds the entries' dot products over the
// panel to the group's partial sums. The groups' sums are then added, in group order, to dweight.
template <bool avx512>
void sparse_linear_backward_weight(float* dweight, const float* dout, const float* inp,
                                   const SparseLinearWeight& weight, int N) {
  check_sparse_linear_packed(weight, "sparse_linear_backward_weight");
  if (N <= 0 || weight.nnz == 0) return;
  const int OC = weight.OC, IC = weight.IC;
  const size_t nnz = weight.nnz;
  const IsaKernel& isa = kernel_for(avx512);
  const int panels = (N + kPanel - 1) / kPanel, groups = std::min(kMaxGroups, panels);
  const int chunks = chunks_of(IC);
  float* partial = at_least(weight.partial_sums, static_cast<size_t>(groups) * nnz);
  const SparseRows A = rows_of(weight);
#pragma omp parallel
  {
    float* P = at_least(t_scratch.p, static_cast<size_t>(IC) * kPanel);
    float* Q = at_least(t_scratch.q, static_cast<size_t>(OC) * kPanel);
#pragma omp for schedule(dynamic, 1)
    for (int g = 0; g < groups; ++g) {
      float* sums = partial + static_cast<size_t>(g) * nnz;
      std::fill(sums, sums + nnz, 0.0f);
      for (int p = panels * g / groups; p < panels * (g + 1) / groups; ++p) {
        const int n0 = p * kPanel, rows = std::min(kPanel, N - n0);
        load_panel(P, inp + static_cast<size_t>(n0) * IC, IC, rows, avx512);
        load_panel(Q, dout + static_cast<size_t>(n0) * OC, OC, rows, avx512);
        for (int c = 0; c < chunks; ++c) isa.dots({sums, Q, P, chunk_rows(A, c, OC), 0, OC});
      }
    }
#pragma omp for schedule(static)
    for (size_t i = 0; i < static_cast<size_t>(chunks) * OC; ++i) {  // segment (chunk, row o)
      float* dw = dweight + (i % OC) * IC;
      for (uint32_t j = A.ptr[i]; j < A.ptr[i + 1]; ++j) {
        float sum = partial[j];
        for (int g = 1; g < groups; ++g) sum += partial[static_cast<size_t>(g) * nnz + j];
        dw[A.offset[j] / kPanelRowBytes] += sum;
      }
    }
  }
}

}  // namespace

void check_sparse_linear_packed(const SparseLinearWeight& w, const char* what) {
  FRUGAL_CHECK(w.OC > 0, "{}: the SparseLinearWeight is not packed; call sparse_linear_pack first",
               what);
}

const SparseLinearKernels sparse_linear_avx2{
    &sparse_linear_pack, &sparse_linear_refresh_values, &sparse_linear_forward<false>,
    &sparse_linear_backward_input<false>, &sparse_linear_backward_weight<false>};
const SparseLinearKernels sparse_linear_avx512{
    &sparse_linear_pack, &sparse_linear_refresh_values, &sparse_linear_forward<true>,
    &sparse_linear_backward_input<true>, &sparse_linear_backward_weight<true>};

}  // namespace frugal::kernels::cpu
