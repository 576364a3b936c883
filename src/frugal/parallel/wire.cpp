// Gradients on the wire in fp32 or bf16; see wire.h.
#include "frugal/parallel/wire.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal::parallel {
namespace {

// inout = bf16(in + inout) elementwise, added in fp32 a piece at a time.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  constexpr int kPiece = 1024;
  float a[kPiece], b[kPiece];
  const auto* x = static_cast<const kernels::bf16*>(in);
  auto* y = static_cast<kernels::bf16*>(inout);
  for (int i = 0; i < *len; i += kPiece) {
    const int n = std::min(kPiece, *len - i);
    kernels::bf16_to_f32(a, x + i, n);
    kernels::bf16_to_f32(b, y + i, n);
    for (int j = 0; j < n; ++j) a[j] += b[j];
    kernels::f32_to_bf16(y + i, a, n);
  }
}

}  // namespace

MPI_Datatype wire_type(kernels::DType wire) { return wire == kernels::DType::BF16 ? MPI_UINT16_T : MPI_FLOAT; }

MPI_Op wire_sum(kernels::DType wire) {
  if (wire != kernels::DType::BF16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op created;
    MPI_Op_create(&bf16_sum, /*commute=*/1, &created);
    return created;
  }();
  return op;
}

void* wire_payload(float* x, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged) {
  if (wire != kernels::DType::BF16) return x;
  staged.resize(n);
  kernels::f32_to_bf16(staged.data(), x, n);
  return staged.data();
}

void all_reduce_sum(MpiWorld& world, MPI_Comm comm, float* x, size_t n, kernels::DType wire,
                    std::vector<kernels::bf16>& staged, const std::string& what) {
  FRUGAL_CHECK(n <= size_t(INT32_MAX), "internal: an all-reduce of {} values", n);
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, wire_payload(x, n, wire, staged), static_cast<int>(n), wire_type(wire), wire_sum(wire),
                 comm, &request);
  world.wait(request, what);
  if (wire == kernels::DType::BF16) kernels::bf16_to_f32(x, staged.data(), n);
}

}  // namespace frugal::parallel
