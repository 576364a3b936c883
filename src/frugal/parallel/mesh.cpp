// The parallel mesh's rank order; see mesh.h.
#include "frugal/parallel/mesh.h"

#include <fmt/format.h>

#include "frugal/core/error.h"

namespace frugal::parallel {

const char* dim_name(Dim dim) {
  static const char* names[kDims] = {"data", "pipeline", "expert", "tensor"};
  return names[static_cast<int>(dim)];
}

MeshShape MeshShape::data_pipeline(int data, int pipeline, int tensor) {
  MeshShape shape;
  shape.sizes[static_cast<int>(Dim::Data)] = data;
  shape.sizes[static_cast<int>(Dim::Pipeline)] = pipeline;
  shape.sizes[static_cast<int>(Dim::Tensor)] = tensor;
  return shape;
}

int MeshShape::ranks() const {
  int n = 1;
  for (int size : sizes) n *= size;
  return n;
}

MeshCoordinates MeshShape::coordinates(int rank) const {
  FRUGAL_CHECK(rank >= 0 && rank < ranks(), "internal: rank {} outside the mesh {}", rank, describe());
  MeshCoordinates c{};
  for (int d = kDims - 1; d >= 0; --d) {  // the innermost dimension varies fastest
    c[d] = rank % sizes[d];
    rank /= sizes[d];
  }
  return c;
}

int MeshShape::rank_of(const MeshCoordinates& c) const {
  int rank = 0;
  for (int d = 0; d < kDims; ++d) {
    FRUGAL_CHECK(c[d] >= 0 && c[d] < sizes[d], "internal: {} coordinate {} outside the mesh {}",
                 dim_name(static_cast<Dim>(d)), c[d], describe());
    rank = rank * sizes[d] + c[d];
  }
  return rank;
}

std::string MeshShape::describe() const {
  std::string out;
  for (int d = 0; d < kDims; ++d)
    if (sizes[d] > 1) out += fmt::format("{}{} {}", out.empty() ? "" : " × ", dim_name(static_cast<Dim>(d)), sizes[d]);
  return out.empty() ? "1 rank" : out;
}

}  // namespace frugal::parallel
