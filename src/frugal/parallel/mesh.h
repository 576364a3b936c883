// The parallel mesh: the ranks of a run as a grid of named dimensions whose sizes multiply to the
// number of ranks. Each rank has one coordinate per dimension; the ranks that differ from it in
// one dimension only form its group in that dimension (e.g. the stages of its pipeline, or the
// replicas of its stage). Pure functions of the shape; mpi_mesh.h makes the groups communicators.
//
// Rank order, outermost to innermost: data, pipeline, expert, tensor (tensor innermost, so that a
// tensor-parallel group, which communicates inside every block, is the ranks nearest each other,
// on one machine first):
//   rank = ((data · P + pipeline) · E + expert) · T + tensor
// Pipelines run data × pipeline × tensor (expert 1): rank = (d·K + k)·T + t, tensor rank t of
// stage k of data-parallel replica d (without tensor parallelism d·K + k); a stage's T ranks are
// consecutive, and the pipeline group of a rank (its stages) the ranks of equal d and t. Tensor
// parallelism alone runs data × tensor (rank = d·T + t) and expert parallelism data × expert
// (rank = d·E + e: the expert group is E consecutive ranks, each a data-parallel rank for the
// replicated tensors; its experts are reduced over the data group, the ranks of equal e).
#pragma once
#include <array>
#include <string>

namespace frugal::parallel {

enum class Dim { Data, Pipeline, Expert, Tensor };  // outermost to innermost in the rank order
inline constexpr int kDims = 4;
const char* dim_name(Dim dim);  // "data", "pipeline", "expert", "tensor"

using MeshCoordinates = std::array<int, kDims>;  // indexed by Dim

struct MeshShape {
  std::array<int, kDims> sizes{1, 1, 1, 1};  // indexed by Dim; each >= 1
  // Data × pipeline × tensor (expert 1).
  static MeshShape data_pipeline(int data, int pipeline, int tensor = 1);
  int size(Dim dim) const { return sizes[static_cast<int>(dim)]; }
  int ranks() const;  // the product of the sizes
  // The coordinates of `rank` (0 <= rank < ranks()) and back.
  MeshCoordinates coordinates(int rank) const;
  int rank_of(const MeshCoordinates& coordinates) const;
  // "data 2 × pipeline 2" (dimensions of size 1 left out; "1 rank" when all are).
  std::string describe() const;
  bool operator==(const MeshShape&) const = default;
};

inline int coordinate(const MeshCoordinates& c, Dim dim) { return c[static_cast<int>(dim)]; }

}  // namespace frugal::parallel
