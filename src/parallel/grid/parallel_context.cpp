#include "parallel/grid/parallel_context.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm/self_comm.h"
#include "core/check.h"

namespace loom {

NodeMap discover_nodes(int* ranks_on_node) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // The ranks sharing memory with this one are its node; the node is keyed
  // by its lowest world rank and named by its host.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int on_node = 0;
  MPI_Comm_size(node, &on_node);
  if (ranks_on_node) *ranks_on_node = on_node;
  int key = rank;
  MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  std::vector<int> keys(size_t(world), 0);
  MPI_Allgather(&key, 1, MPI_INT, keys.data(), 1, MPI_INT, MPI_COMM_WORLD);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  std::vector<char> hosts(size_t(world) * MPI_MAX_PROCESSOR_NAME, 0);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<std::string> host_of_rank;
  for (int r = 0; r < world; r++) {
    const char* h = hosts.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME;
    host_of_rank.emplace_back(h, strnlen(h, MPI_MAX_PROCESSOR_NAME));
  }
  return NodeMap::from_keys(keys, host_of_rank);
}

std::unique_ptr<ParallelContext> ParallelContext::create_mpi(const ParallelGrid& grid, const MpiOptions& opts,
                                                             const DpReduceOptions& dp_reduce) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  LOOM_CHECK(world == grid.world_size(), "grid of %d ranks for a world of %d", grid.world_size(), world);
  std::unique_ptr<ParallelContext> ctx(new ParallelContext(grid, rank));
  ctx->nodes_ = discover_nodes(&ctx->ranks_on_node_);
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<int> members = grid.group(kind, rank);
    // Every group is named by its smallest member, which no other group of
    // the same kind contains: a valid, unique split color.
    int color = *std::min_element(members.begin(), members.end());
    ctx->comms_[size_t(kind)] = MpiComm::split(group_kind_name(kind), color, members, opts);
  }
  NodeMap nodes = ctx->nodes_;
  if (int n = dp_reduce.pretend_ranks_per_node; n > 0) {
    std::vector<int> keys;
    for (int r = 0; r < world; r++) keys.push_back(r / n);
    nodes = NodeMap::from_keys(keys, std::vector<std::string>(size_t(world), "pretend"));
  }
  // Every rank knows the node map, so every rank takes the same branch.
  if (dp_reduce.mode != "flat" && hierarchy_applies(grid, nodes)) {
    Communicator& flat = *ctx->comms_[size_t(GroupKind::data)];
    ctx->dp_hierarchical_ = make_hierarchical_dp(grid, nodes, rank, flat, opts);
    ctx->dp_reduce_ = choose_dp_reduce(dp_reduce, flat, *ctx->dp_hierarchical_, ctx->world());
  } else {
    ctx->dp_reduce_.applies = hierarchy_applies(grid, nodes);
  }
  return ctx;
}

std::unique_ptr<ParallelContext> ParallelContext::create_single() {
  std::unique_ptr<ParallelContext> ctx(new ParallelContext(ParallelGrid(1, 1, 1), 0));
  ctx->nodes_ = NodeMap::single(1);
  for (GroupKind kind : kAllGroupKinds) ctx->comms_[size_t(kind)] = std::make_unique<SelfComm>(group_kind_name(kind));
  return ctx;
}

}  // namespace loom
