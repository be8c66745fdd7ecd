// How the data-parallel group sums its gradients when its ranks sit on
// several nodes: flat (one MPI all-reduce over the whole group) or
// hierarchical (comm/hierarchical_comm.h: reduce inside each node, all-reduce
// between nodes, broadcast inside each node), by parallel.dp_reduce:
//
//   "flat"          always flat
//   "hierarchical"  hierarchical wherever it applies
//   "auto"          where it applies, both are timed at start-up on one
//                   all-reduce of a bucket's size (at most 4 MiB), and the
//                   faster is kept (hierarchical only when 3% faster)
//
// It applies when some data group spans nodes with more than one of its
// ranks on one node (otherwise the stages would be the flat all-reduce).
// ZeRO's reduce-scatters, and sums too small to gain, stay flat.
#pragma once

#include <memory>
#include <string>

#include "comm/hierarchical_comm.h"
#include "comm/mpi_comm.h"
#include "parallel/grid/node_map.h"
#include "parallel/grid/parallel_grid.h"

namespace loom {

struct DpReduceOptions {
  std::string mode = "flat";     // parallel.dp_reduce
  size_t probe_bytes = 4 << 20;  // "auto": the all-reduce timed each way
  // Tests and benches on one machine: every N consecutive ranks count as a
  // node for the hierarchy (0: the nodes MPI found).
  int pretend_ranks_per_node = 0;
};

struct DpReduceChoice {
  bool applies = false;       // some data group spans nodes with 2+ of its ranks on one
  bool hierarchical = false;  // what runs
  bool measured = false;      // "auto" timed both
  double flat_ms = 0, hierarchical_ms = 0;  // measured: slowest rank, best of 3
  size_t probe_bytes = 0;
  std::string description;    // the hierarchy: "2 nodes x 2 ranks"
  // "dp reduction: hierarchical over 2 nodes x 2 ranks (measured at start-up: ...)"
  std::string line() const;
};

bool hierarchy_applies(const ParallelGrid& grid, const NodeMap& nodes);

// Collective over the world: the stage groups of `rank`'s data group, around
// `flat` (that group, which it uses for everything else).
std::unique_ptr<HierarchicalComm> make_hierarchical_dp(const ParallelGrid& grid, const NodeMap& nodes, int rank,
                                                       Communicator& flat, const MpiOptions& opts);

// Collective over the world: by options.mode, timing both when "auto".
DpReduceChoice choose_dp_reduce(const DpReduceOptions& options, Communicator& flat, HierarchicalComm& hierarchical,
                                Communicator& world);

}  // namespace loom
