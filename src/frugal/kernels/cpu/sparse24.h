// 2:4 structured-sparse linear products on CPU (METHODS.md section 4).
//
// A 2:4 matrix A (R,K) keeps exactly two entries in every group of 4 consecutive entries of a
// row. It is packed in 4-row tiles, the layout the micro-kernel streams: for tile t (rows 4t..4t+3)
// and group g (columns 4g..4g+3), one unit holds 8 kept values and the byte offsets of the input
// panel rows they multiply (column within the chunk × 384: the micro-kernel's transposed input
// panel has 96 floats per row), so the kernel adds an offset to a pointer and FMAs, with no index
// arithmetic. The groups are cut into chunks of 24 and the units stored chunk-major (chunk, tile,
// unit), so the kernel reads the whole packed matrix as one sequential stream once per panel:
// the hardware prefetcher keeps up with that, not with a tile-major layout's jumps (measured:
// 1.2x faster kernel at 3072 x 768).
//
// A transposably masked linear weight W (OC,IC) is packed twice from the same mask: W (2:4 along
// IC) for the forward product and Wᵀ (2:4 along OC) for the input gradient. Each 4x4 block then
// keeps two entries per column too, so a unit holds one offset per block column ("slot", relative
// to the start of its chunk of 24 groups) and the two values of the rows reading it; within each
// chunk of a tile the units are sorted by the block's row structure (one of 6 classes, see
// sparse24_microkernel.h) with the count of each class stored.
//
// The layout depends only on the mask; the values change with every optimizer step. Each unit
// records where its values come from (its W block and the entry of each value), so after an
// optimizer step sparse24_refresh_values() only gathers the new values: no mask reading,
// classification or sorting (those run in sparse24_pack, once per mask update).
//
// The products, the packing and the MVUE estimator are declared in kernels/ops.h (the model layer
// calls them there and holds a Sparse24Weight only through ops.h's Sparse24Packed handle); this
// header adds the CPU layout, for tests and benchmarks, and what the family's kernel tables
// (kernels/cpu/cpu_backend.h) share.
#pragma once
#include <cstdint>

#include "frugal/core/memory.h"
#include "frugal/kernels/dispatch.h"

namespace frugal::kernels {

struct Sparse24Matrix {
  int rows = 0, cols = 0;         // R, K of the dense matrix
  bool classed = false;           // transposable layout (slots, class-sorted) vs row-only
  bool transposed = false;        // A = Wᵀ: unit (t, g) holds W block (g, t)
  // Per unit, chunk-major (unit of tile t, chunk starting at group g0 with L groups: g0 * R/4 +
  // t * L + position):
  Buffer<float> values;           // (units, 8) kept values: row-only (4 rows, 2 each);
                                  // classed (4 slots, rows a and b of the class)
  Buffer<uint16_t> offsets;       // row-only (units, 8): column within the chunk × panel row
                                  // bytes; classed (units, 4): the same per slot
  Buffer<uint8_t> class_counts;   // classed: (chunks, R/4, 6) units of each class per chunk
  Buffer<uint64_t> sources;       // (units): bits 4i..4i+3 = entry (4·row + col) of the W block
                                  // that value i copies; bits 32..39 = the group within the chunk
};

struct Sparse24Weight {
  int OC = 0, IC = 0;
  Sparse24Matrix w;   // W (OC,IC): forward, contraction over IC
  Sparse24Matrix wt;  // Wᵀ (IC,OC): input gradient, contraction over OC
  // The reference path (FRUGAL_ISA=ref) only: W (OC,IC) and its mask, dense, as the naive
  // products read them; empty on the optimised paths.
  Buffer<float> ref_weight;
  Buffer<uint8_t> ref_mask;
};

namespace cpu {

// The MVUE estimator of kernels/ops.h (sparse24_mvue.cpp): its own naive reference, so every
// path runs it.
void mvue24_rows(float* dout_sparse, const float* dout, int N, int OC, uint64_t key, const int32_t* column,
                 int whole_OC);
// Throw Error naming `what` when w is not packed (sparse24_pack) or, for the input gradient, was
// packed row-only: the checks of every path's products.
void check_sparse24_packed(const Sparse24Weight& w, const char* what);
void check_sparse24_transposable(const Sparse24Weight& w, const char* what);

}  // namespace cpu
}  // namespace frugal::kernels
