// The dtype messages travel in between ranks (parallel.comm_dtype): fp32 as they are, or bf16 —
// rounded to nearest (ties to even) before they leave, half the bytes on the wire. Gradient
// reductions here sum in fp32 with every partial sum rounded to bf16 (a user-defined MPI sum on
// MPI_UINT16_T, exactly commutative, so every rank's copy of a sum is the same) and widen the
// result back to fp32; the pipeline's stage messages and a tensor group's rows use wire_type
// (pipeline.cpp, tensor_parallel.cpp).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/parallel/mpi_world.h"

namespace frugal::parallel {

// The MPI datatype and sum of a wire dtype (F32: MPI_FLOAT, MPI_SUM; BF16: MPI_UINT16_T and the
// bf16 sum, created on first use).
MPI_Datatype wire_type(kernels::DType wire);
MPI_Op wire_sum(kernels::DType wire);

// What a collective sends for x (n floats): x itself on an fp32 wire; on a bf16 wire x rounded
// into `staged`, whose start holds the collective's result afterwards.
void* wire_payload(float* x, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged);
// The same for a send that leaves x as it is.
const void* wire_payload(const float* x, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged);
// Where a message of n values for `out` arrives: out itself on an fp32 wire, on a bf16 wire
// `staged`; wire_arrived then widens them into out.
void* wire_landing(float* out, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged);
void wire_arrived(float* out, size_t n, kernels::DType wire, const std::vector<kernels::bf16>& staged);

// x (n floats) = its sum over the ranks of comm, sent as `wire`; `staged` holds the bf16 payload
// between calls. Waits through world.wait, which names a silent rank in `what`.
void all_reduce_sum(MpiWorld& world, MPI_Comm comm, float* x, size_t n, kernels::DType wire,
                    std::vector<kernels::bf16>& staged, const std::string& what);

// Reduce-scatter of buffer[b, e) over the ranks of comm, in place: rank r's part of it, [bounds[r],
// bounds[r + 1]) ∩ [b, e) (bounds: one offset per rank and the end, indexed like the buffer), gets
// its sum over the ranks, sent as `wire`; the pages of the rest of [b, e) are released (no longer
// needed). `counts` and `staged` are scratch kept between calls.
void reduce_scatter_sum(MpiWorld& world, MPI_Comm comm, float* buffer, size_t b, size_t e,
                        const std::vector<size_t>& bounds, kernels::DType wire, std::vector<kernels::bf16>& staged,
                        std::vector<int>& counts, const std::string& what);

}  // namespace frugal::parallel
