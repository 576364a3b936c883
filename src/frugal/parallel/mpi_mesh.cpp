// The mesh's communicators; see mpi_mesh.h.
#include "frugal/parallel/mpi_mesh.h"

#include "frugal/core/error.h"

namespace frugal::parallel {

MpiMesh::MpiMesh(const MeshShape& shape, MPI_Comm parent) : shape_(shape) {
  int rank = 0, size = 0;
  MPI_Comm_rank(parent, &rank);
  MPI_Comm_size(parent, &size);
  FRUGAL_CHECK(size == shape.ranks(), "internal: a mesh of {} ({} ranks) over {} ranks", shape.describe(),
               shape.ranks(), size);
  coordinates_ = shape.coordinates(rank);
  for (int d = 0; d < kDims; ++d) {
    // The group's colour: the rank of its member whose coordinate in d is 0.
    MeshCoordinates first = coordinates_;
    first[d] = 0;
    MPI_Comm_split(parent, shape.rank_of(first), coordinates_[d], &groups_[d]);
  }
}

MpiMesh::~MpiMesh() {
  for (MPI_Comm& group : groups_) MPI_Comm_free(&group);
}

}  // namespace frugal::parallel
