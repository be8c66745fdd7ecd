#include "parallel/grid/parallel_context.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

std::unique_ptr<ParallelContext> ParallelContext::create_mpi(const ParallelGrid& grid, const MpiOptions& opts) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  LOOM_CHECK(world == grid.world_size(), "grid of %d ranks for a world of %d", grid.world_size(), world);
  std::unique_ptr<ParallelContext> ctx(new ParallelContext(grid, rank));
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<int> members = grid.group(kind, rank);
    // Every group is named by its smallest member, which no other group of
    // the same kind contains: a valid, unique split color.
    int color = *std::min_element(members.begin(), members.end());
    ctx->comms_[size_t(kind)] = MpiComm::split(group_kind_name(kind), color, members, opts);
  }
  return ctx;
}

}  // namespace loom
