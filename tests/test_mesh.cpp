// The parallel mesh (parallel/mesh.h, mpi_mesh.h): the rank order (tensor innermost, data
// outermost) as a pure function, and under mpirun -np 4 the communicator of each dimension.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/parallel/mesh.h"
#include "mpi_runs.h"

#ifdef FRUGAL_HAVE_MPI
#include "frugal/parallel/mpi_mesh.h"
#include "frugal/parallel/mpi_world.h"
#include "paths.h"
#endif

namespace frugal::parallel {
namespace {

TEST(Mesh, RanksAndCoordinatesAreOneToOneWithTensorInnermost) {
  MeshShape shape;
  shape.sizes = {2, 3, 2, 2};  // data, pipeline, expert, tensor
  EXPECT_EQ(shape.ranks(), 24);
  EXPECT_EQ(shape.describe(), "data 2 × pipeline 3 × expert 2 × tensor 2");
  for (int rank = 0; rank < shape.ranks(); ++rank) EXPECT_EQ(shape.rank_of(shape.coordinates(rank)), rank);
  EXPECT_EQ(shape.coordinates(1), (MeshCoordinates{0, 0, 0, 1}));   // the next rank: the next tensor shard
  EXPECT_EQ(shape.coordinates(2), (MeshCoordinates{0, 0, 1, 0}));
  EXPECT_EQ(shape.coordinates(4), (MeshCoordinates{0, 1, 0, 0}));
  EXPECT_EQ(shape.coordinates(12), (MeshCoordinates{1, 0, 0, 0}));
  EXPECT_EQ(shape.rank_of({1, 2, 1, 1}), 23);
  EXPECT_THROW(shape.coordinates(24), Error);
  EXPECT_THROW(shape.rank_of({0, 3, 0, 0}), Error);
}

TEST(Mesh, DataTimesPipelineIsStageKOfReplicaD) {
  const MeshShape shape = MeshShape::data_pipeline(2, 3);
  EXPECT_EQ(shape.describe(), "data 2 × pipeline 3");
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(coordinate(shape.coordinates(rank), Dim::Data), rank / 3);
    EXPECT_EQ(coordinate(shape.coordinates(rank), Dim::Pipeline), rank % 3);
  }
  EXPECT_EQ(MeshShape{}.describe(), "1 rank");
}

// A pipeline of tensor groups: rank (d·K + k)·T + t, each stage's T tensor ranks consecutive.
TEST(Mesh, DataTimesPipelineTimesTensorIsTensorRankTOfStageKOfReplicaD) {
  const MeshShape shape = MeshShape::data_pipeline(2, 3, 2);
  EXPECT_EQ(shape.describe(), "data 2 × pipeline 3 × tensor 2");
  for (int rank = 0; rank < 12; ++rank) {
    const MeshCoordinates c = shape.coordinates(rank);
    EXPECT_EQ(rank, (coordinate(c, Dim::Data) * 3 + coordinate(c, Dim::Pipeline)) * 2 + coordinate(c, Dim::Tensor));
    EXPECT_EQ(coordinate(c, Dim::Tensor), rank % 2);
    EXPECT_EQ(coordinate(c, Dim::Pipeline), rank / 2 % 3);
  }
}

#ifdef FRUGAL_HAVE_MPI
// Run by the test below on each of 4 ranks (mpirun -np 4): a data 2 × pipeline 2 mesh; each rank
// checks its coordinates and the world ranks of each of its groups, in coordinate order.
TEST(Mesh, DISABLED_GroupsOnFourRanks) {
  MpiWorld world(nullptr, nullptr);
  ASSERT_EQ(world.size(), 4);
  MPI_Comm base = world.new_communicator();
  {
    const MpiMesh mesh(MeshShape::data_pipeline(2, 2), base);
    const int rank = world.rank();
    EXPECT_EQ(mesh.coordinate(Dim::Data), rank / 2);
    EXPECT_EQ(mesh.coordinate(Dim::Pipeline), rank % 2);
    auto members = [&](Dim dim) {
      int size = 0;
      MPI_Comm_size(mesh.group(dim), &size);
      std::vector<int> ranks(size);
      MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, mesh.group(dim));
      return ranks;
    };
    const int d = rank / 2, k = rank % 2;
    EXPECT_EQ(members(Dim::Pipeline), (std::vector<int>{2 * d, 2 * d + 1})) << "rank " << rank;
    EXPECT_EQ(members(Dim::Data), (std::vector<int>{k, 2 + k})) << "rank " << rank;
    EXPECT_EQ(members(Dim::Tensor), std::vector<int>{rank}) << "rank " << rank;
    EXPECT_EQ(members(Dim::Expert), std::vector<int>{rank}) << "rank " << rank;
  }
  MPI_Comm_free(&base);
}

TEST(Mesh, GroupsOnFourRanksHoldTheRanksThatDifferInOneCoordinate) {
  const std::string self = ::testing::internal::GetArgvs().front();
  const testing::CliResult r = testing::run_shell(
      fmt::format("{} --allow-run-as-root --oversubscribe --bind-to none -np 4 {} "
                  "--gtest_also_run_disabled_tests --gtest_filter=Mesh.DISABLED_GroupsOnFourRanks",
                  test_paths::mpiexec(), self));
  EXPECT_EQ(r.rc, 0) << r.output;
}
#endif

}  // namespace
}  // namespace frugal::parallel
