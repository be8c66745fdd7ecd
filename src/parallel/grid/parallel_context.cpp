#include "parallel/grid/parallel_context.h"

#include <algorithm>

#include "comm/self_comm.h"
#include "core/check.h"

namespace loom {

std::unique_ptr<ParallelContext> ParallelContext::create_mpi(const ParallelGrid& grid, const MpiOptions& opts) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  LOOM_CHECK(world == grid.world_size(), "grid of %d ranks for a world of %d", grid.world_size(), world);
  std::unique_ptr<ParallelContext> ctx(new ParallelContext(grid, rank));
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &ctx->ranks_on_node_);
  MPI_Comm_free(&node);
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<int> members = grid.group(kind, rank);
    // Every group is named by its smallest member, which no other group of
    // the same kind contains: a valid, unique split color.
    int color = *std::min_element(members.begin(), members.end());
    ctx->comms_[size_t(kind)] = MpiComm::split(group_kind_name(kind), color, members, opts);
  }
  return ctx;
}

std::unique_ptr<ParallelContext> ParallelContext::create_single() {
  std::unique_ptr<ParallelContext> ctx(new ParallelContext(ParallelGrid(1, 1, 1), 0));
  for (GroupKind kind : kAllGroupKinds) ctx->comms_[size_t(kind)] = std::make_unique<SelfComm>(group_kind_name(kind));
  return ctx;
}

}  // namespace loom
