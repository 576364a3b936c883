// Gradients on the wire in fp32 or bf16; see wire.h.
#include "frugal/parallel/wire.h"

#include <algorithm>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
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

const void* wire_payload(const float* x, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged) {
  if (wire != kernels::DType::BF16) return x;
  staged.resize(n);
  kernels::f32_to_bf16(staged.data(), x, n);
  return staged.data();
}

void* wire_payload(float* x, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged) {
  return const_cast<void*>(wire_payload(static_cast<const float*>(x), n, wire, staged));
}

void* wire_landing(float* out, size_t n, kernels::DType wire, std::vector<kernels::bf16>& staged) {
  if (wire != kernels::DType::BF16) return out;
  staged.resize(n);
  return staged.data();
}

void wire_arrived(float* out, size_t n, kernels::DType wire, const std::vector<kernels::bf16>& staged) {
  if (wire == kernels::DType::BF16) kernels::bf16_to_f32(out, staged.data(), n);
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

void reduce_scatter_sum(MpiWorld& world, MPI_Comm comm, float* buffer, size_t b, size_t e,
                        const std::vector<size_t>& bounds, kernels::DType wire, std::vector<kernels::bf16>& staged,
                        std::vector<int>& counts, const std::string& what) {
  // Rank r's sum of its part lands at the range's start (of the bf16 payload staged on a bf16
  // wire) and moves to where it belongs.
  int n = 1, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  FRUGAL_CHECK(bounds.size() == size_t(n) + 1, "internal: a reduce-scatter needs one shard per rank");
  void* payload = wire_payload(buffer + b, e - b, wire, staged);
  counts.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    const size_t lo = std::max(b, bounds[r]), hi = std::min(e, bounds[r + 1]);
    counts[r] = lo < hi ? static_cast<int>(hi - lo) : 0;
  }
  MPI_Request request;
  MPI_Ireduce_scatter(MPI_IN_PLACE, payload, counts.data(), wire_type(wire), wire_sum(wire), comm, &request);
  world.wait(request, what);
  const size_t own = std::max(b, bounds[me]), own_end = own + counts[me];
  if (counts[me] > 0 && wire == kernels::DType::BF16) kernels::bf16_to_f32(buffer + own, staged.data(), counts[me]);
  if (counts[me] > 0 && wire != kernels::DType::BF16) std::memmove(buffer + own, buffer + b, sizeof(float) * counts[me]);
  const size_t keep_begin = counts[me] > 0 ? own : e, keep_end = counts[me] > 0 ? own_end : e;
  release_pages(buffer + b, sizeof(float) * (keep_begin - b));
  release_pages(buffer + keep_end, sizeof(float) * (e - keep_end));
}

}  // namespace frugal::parallel
