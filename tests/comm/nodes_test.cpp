// The nodes a job's ranks learn at start-up (issue 22): every rank agrees,
// and ranks sharing this machine's memory are one node named by its host.
// (Several machines: scripts/launch/ and the emulated cluster.)
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "comm/layout_check.h"

namespace {

TEST(Nodes, EveryRankOfThisMachineIsOneNode) {
  const loom::ParallelContext& ctx = loom::test::world_context(1, 1);
  const loom::NodeMap& m = ctx.nodes();
  ASSERT_EQ(int(m.node_of_rank.size()), loom::test::world_size());
  EXPECT_EQ(m.nodes(), 1);
  EXPECT_EQ(m.max_ranks_per_node(), loom::test::world_size());
  EXPECT_EQ(m.max_ranks_per_node(), ctx.ranks_on_node());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char mpi_name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(mpi_name, &len);
  EXPECT_EQ(m.names.at(0), std::string(mpi_name, size_t(len))) << "gethostname: " << host;
  // Every rank holds the same map.
  int node_count = m.nodes(), max_count = 0, min_count = 0;
  MPI_Allreduce(&node_count, &max_count, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&node_count, &min_count, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(max_count, min_count);
}

}  // namespace
