// Unstructured sparse linear products on CPU (docs/sparse_linear.md): the packed layout of
// S(W) = W ⊙ M for an arbitrary mask, and the instruction-set selection.
//
// S(W) is kept twice, by rows (CSR: W's rows, the forward product and the weight gradient) and by
// columns (Wᵀ's rows: the input gradient), each entry as a value and the byte offset of the
// feature-major panel row it multiplies (sparse_linear_microkernel.h). The column copy's values
// are gathered from the row copy through a permutation, so sparse_linear_refresh_values() after an
// optimizer step reads the kept values of W once and re-derives both copies; the structure
// (counting, prefix sums, offsets, permutation) is built only by sparse_linear_pack, once per mask
// change.
//
// The products and the packing are declared in kernels/ops.h (the model layer holds a
// SparseLinearWeight only through ops.h's SparseLinearPacked handle); this header adds the CPU
// layout, for tests and benchmarks, and what the family's kernel tables (kernels/cpu/cpu_backend.h)
// share.
#pragma once
#include <cstdint>

#include "frugal/core/memory.h"
#include "frugal/kernels/dispatch.h"

namespace frugal::kernels {

struct SparseLinearWeight {
  int OC = 0, IC = 0;
  size_t nnz = 0;
  // W by rows, in column chunks of 192 (sparse_linear_microkernel.h): the entries of row o in
  // column chunk c are [row_ptr[c·OC + o], row_ptr[c·OC + o + 1]), by increasing column k.
  Buffer<uint32_t> row_ptr;     // (chunks of IC · OC + 1)
  Buffer<uint32_t> row_offset;  // (nnz) k × the panel row bytes
  Buffer<float> row_values;     // (nnz) W[o, k]
  // Wᵀ by rows (W by columns), in chunks of 192 of W's rows: the entries of column k in row chunk
  // c are [col_ptr[c·IC + k], col_ptr[c·IC + k + 1]), by increasing o.
  Buffer<uint32_t> col_ptr;     // (chunks of OC · IC + 1)
  Buffer<uint32_t> col_offset;  // (nnz) o × the panel row bytes
  Buffer<uint32_t> col_source;  // (nnz) the index of the same entry in the row copy
  Buffer<float> col_values;     // (nnz) row_values[col_source[j]]
  // Weight-gradient scratch: the partial sums of each token group (groups × nnz), grown on demand.
  mutable Buffer<float> partial_sums;
  // The reference path (FRUGAL_ISA=ref) only: W (OC,IC) and its mask, dense, as the naive
  // products read them; empty on the optimised paths.
  Buffer<float> ref_weight;
  Buffer<uint8_t> ref_mask;
};

namespace cpu {

// Throws Error naming `what` when w is not packed (sparse_linear_pack): every path's check.
void check_sparse_linear_packed(const SparseLinearWeight& w, const char* what);

}  // namespace cpu
}  // namespace frugal::kernels
