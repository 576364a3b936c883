// 2:4 structured-sparse linear products on CPU (METHODS.md section 4).
//
// A 2:4 matrix A (R,K) keeps exactly two entries in every group of 4 consecutive entries of a
// row. It is packed in 4-row tiles, the layout the micro-kernel streams: for tile t (rows 4t..4t+3)
// and group g (columns 4g..4g+3), one unit holds the 8 kept values (row by row, in column order)
// and their 8 uint16 offsets: in-group column × 384, the byte offset of that column's row in the
// micro-kernel's transposed input panel (96 floats per row), so the kernel adds the offset to a
// pointer and FMAs, with no index arithmetic. Units are stored tile-major (unit t * K/4 + g), so
// a tile's run of groups is contiguous.
//
// A transposably masked linear weight W (OC,IC) is packed twice from the same mask: W (2:4 along
// IC) for the forward product and Wᵀ (2:4 along OC) for the input gradient. Repack after every
// optimizer step (one parallel pass over W and the mask).
#pragma once
#include <cstdint>

#include "frugal/core/memory.h"

namespace frugal::kernels {

struct Sparse24Matrix {
  int rows = 0, cols = 0;    // R, K of the dense matrix
  Buffer<float> values;      // (R/4, K/4, 4, 2) kept values
  Buffer<uint16_t> offsets;  // (R/4, K/4, 4, 2) in-group column × panel row bytes
};

struct Sparse24Weight {
  int OC = 0, IC = 0;
  Sparse24Matrix w;   // W (OC,IC): forward, contraction over IC
  Sparse24Matrix wt;  // Wᵀ (IC,OC): input gradient, contraction over OC
};

// out = the mask ⊙ W packed both ways. W (OC,IC), mask (OC,IC) 0/1; the mask must be transposable
// 2:4 (every 4x4 block has two kept entries per row and per column), OC % 4 == IC % 4 == 0.
// With transposable = false only W is packed (the mask needs two kept entries per row of each
// block; out.wt stays empty) and only the forward product is available.
// Buffers are reused when the shape is unchanged.
void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable = true);

// out (N,OC) = inp (N,IC) · S(W)ᵀ + bias (OC) or null
void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N);

// dinp (N,IC) = (or += when accumulate) dout (N,OC) · S(W); needs a transposable packing.
void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate);

// Micro-kernel instruction set. Auto picks AVX-512 when the CPU has it, else AVX2/FMA.
enum class Sparse24Isa { Auto, Avx2, Avx512 };
// Selects the micro-kernel for all later calls (tests and benchmarks compare both); throws when
// the CPU lacks the requested instruction set. Returns the instruction set now in use.
Sparse24Isa sparse24_set_isa(Sparse24Isa isa);
Sparse24Isa sparse24_active_isa();
const char* sparse24_isa_name(Sparse24Isa isa);

}  // namespace frugal::kernels
