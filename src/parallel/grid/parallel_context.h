// ParallelContext: the grid, this rank's place in it, and one Communicator
// per group kind. Made once at start-up and passed explicitly (no globals).
#pragma once

#include <array>
#include <memory>

#include "comm/communicator.h"
#include "comm/hierarchical_comm.h"
#include "comm/mpi_comm.h"
#include "parallel/grid/dp_hierarchy.h"
#include "parallel/grid/node_map.h"
#include "parallel/grid/parallel_grid.h"

namespace loom {

// Collective over MPI_COMM_WORLD: which node each rank runs on (MPI's
// shared-memory split, named by MPI_Get_processor_name); sets *ranks_on_node
// to this rank's node's count when given.
NodeMap discover_nodes(int* ranks_on_node = nullptr);

class ParallelContext {
 public:
  // Collective over every world rank: splits one MPI communicator per group;
  // the data group's sums hierarchical across nodes by `dp_reduce`
  // (parallel/grid/dp_hierarchy.h).
  static std::unique_ptr<ParallelContext> create_mpi(const ParallelGrid& grid, const MpiOptions& opts,
                                                     const DpReduceOptions& dp_reduce = {});
  // One process, no MPI: every group is this rank alone (SelfComm).
  static std::unique_ptr<ParallelContext> create_single();

  const ParallelGrid& grid() const { return grid_; }
  int rank() const { return rank_; }  // world rank
  const GridCoord& coord() const { return coord_; }
  bool is_logging_rank() const { return rank_ == 0; }
  // How many ranks of the job share this machine (to split its cores).
  int ranks_on_node() const { return ranks_on_node_; }
  // Which node every rank runs on (learnt at start-up).
  const NodeMap& nodes() const { return nodes_; }

  // The data group is the hierarchical one when that was chosen.
  Communicator& group(GroupKind kind) const {
    if (kind == GroupKind::data && dp_reduce_.hierarchical) return *dp_hierarchical_;
    return *comms_[size_t(kind)];
  }
  // How the data group reduces across nodes, and why.
  const DpReduceChoice& dp_reduce() const { return dp_reduce_; }
  Communicator& tp() const { return group(GroupKind::tp); }
  Communicator& dp() const { return group(GroupKind::data); }
  Communicator& pp() const { return group(GroupKind::pp); }
  Communicator& cp() const { return group(GroupKind::cp); }
  Communicator& world() const { return group(GroupKind::world); }

 private:
  ParallelContext(const ParallelGrid& grid, int rank) : grid_(grid), rank_(rank), coord_(grid.coord(rank)) {}
  ParallelGrid grid_;
  int rank_;
  GridCoord coord_;
  int ranks_on_node_ = 1;
  NodeMap nodes_;
  std::array<std::unique_ptr<Communicator>, kAllGroupKinds.size()> comms_;
  std::unique_ptr<HierarchicalComm> dp_hierarchical_;  // over comms_[data]; declared after it, destroyed first
  DpReduceChoice dp_reduce_;
};

}  // namespace loom
