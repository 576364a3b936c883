// A rank's place in the parallel mesh (mesh.h) over MPI: its coordinates and one communicator
// per dimension, holding the ranks that differ from it in that dimension only, ordered by their
// coordinate there (a rank's rank in group(d) is its coordinate in d).
#pragma once
#include <mpi.h>

#include "frugal/parallel/mesh.h"

namespace frugal::parallel {

class MpiMesh {
 public:
  // Collective over `parent`, whose size must be shape.ranks(): the rank in `parent` is the rank
  // in the mesh.
  MpiMesh(const MeshShape& shape, MPI_Comm parent);
  ~MpiMesh();
  MpiMesh(const MpiMesh&) = delete;
  MpiMesh& operator=(const MpiMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coordinates_; }
  int coordinate(Dim dim) const { return parallel::coordinate(coordinates_, dim); }
  MPI_Comm group(Dim dim) const { return groups_[static_cast<int>(dim)]; }

 private:
  MeshShape shape_;
  MeshCoordinates coordinates_;
  std::array<MPI_Comm, kDims> groups_;
};

}  // namespace frugal::parallel
