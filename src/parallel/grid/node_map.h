// Which machine (node) each world rank runs on, learnt at start-up (MPI's
// shared-memory split, named by the host), and where the grid's groups fall
// on them: a tensor-parallel group whose ranks span nodes sends its
// all-reduces over the network instead of the node's fast links.
// A value type: no communication.
#pragma once

#include <string>
#include <vector>

#include "parallel/grid/parallel_grid.h"

namespace loom {

struct NodeMap {
  std::vector<int> node_of_rank;  // node index per world rank; nodes numbered by their first rank
  std::vector<std::string> names;  // host name per node

  // Every rank on one node called `name`.
  static NodeMap single(int world, const std::string& name = "localhost");
  // From each rank's node key (equal keys: same node; e.g. the node's
  // lowest world rank) and host name.
  static NodeMap from_keys(const std::vector<int>& key_of_rank, const std::vector<std::string>& host_of_rank);

  int nodes() const { return int(names.size()); }
  // The most ranks any node holds.
  int max_ranks_per_node() const;
  // The groups of this kind whose ranks sit on more than one node.
  std::vector<std::vector<int>> groups_across_nodes(const ParallelGrid& grid, GroupKind kind) const;
  // "2 nodes (node0: ranks 0-3, node1: ranks 4-7)"
  std::string describe() const;
  // What a run logs about its groups' placement: the nodes, whether every
  // tensor-parallel group stays inside one (a warning naming the first that
  // does not), and the same for context-parallel rings and expert-parallel
  // groups.
  std::vector<std::string> placement_lines(const ParallelGrid& grid) const;
};

}  // namespace loom
