#include "planner/comm_cost.h"

#include <algorithm>

#include "parallel/grid/parallel_grid.h"

namespace loom::planner {
namespace {

// Ranks fill the nodes in order, ranks_per_node each (mpirun's --map-by
// slot and Slurm's block distribution).
Link link_of(const ClusterSpec& c, const ParallelGrid& grid, GroupKind kind, int ranks_per_node) {
  const std::vector<int> members = grid.group(kind, 0);
  const int node = members[0] / ranks_per_node;
  int on_node = 0;
  for (int r : members) on_node += r / ranks_per_node == node;
  // What a large collective reaches of each link's nominal bandwidth.
  const double intra = c.intra_bandwidth * c.intra_efficiency;
  if (on_node == int(members.size())) return {intra, c.intra_latency, false};
  // ranks_per_node / on_node groups of this kind leave each node at once and share its NICs.
  const double share = c.inter_bandwidth * c.inter_efficiency * on_node / ranks_per_node;
  return {std::min(intra, share), std::max(c.intra_latency, c.inter_latency), true, on_node, intra, c.intra_latency};
}

}  // namespace

GroupLinks group_links(const ClusterSpec& cluster, int dp, int tp, int pp, int cp, const std::string& order, int ep) {
  ParallelGrid grid(dp, tp, pp, order, cp, ep);
  // The ranks spread evenly over the nodes, as many on each as fit (a
  // search's world is whole nodes; a run's is its ranks per node).
  const int world = grid.world_size(), nodes = std::max(1, cluster.nodes);
  const int per_node = (world + nodes - 1) / nodes;
  return {link_of(cluster, grid, GroupKind::tp, per_node),          link_of(cluster, grid, GroupKind::data, per_node),
          link_of(cluster, grid, GroupKind::pp, per_node),          link_of(cluster, grid, GroupKind::cp, per_node),
          link_of(cluster, grid, GroupKind::ep, per_node), link_of(cluster, grid, GroupKind::expert_data, per_node)};
}

double all_reduce_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.latency + 2.0 * (n - 1) / n * bytes / link.bandwidth;
}

double hierarchical_all_reduce_seconds(double bytes, int n, const Link& link) {
  const int per_node = link.on_node, nodes = per_node > 0 ? n / per_node : 1;
  if (!link.crosses_nodes || per_node <= 1 || nodes <= 1) return all_reduce_seconds(bytes, n, link);
  const Link node{link.node_bandwidth, link.node_latency, false};
  // A pipelined reduce and broadcast move what a reduce-scatter and an
  // all-gather do; between the nodes each node's link carries one ring.
  return reduce_scatter_seconds(bytes, per_node, node) + all_reduce_seconds(bytes, nodes, link) +
         all_gather_seconds(bytes, per_node, node);
}

double reduce_scatter_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency + double(n - 1) / n * bytes / link.bandwidth;
}

double all_gather_seconds(double bytes, int n, const Link& link) { return reduce_scatter_seconds(bytes, n, link); }

double p2p_seconds(double bytes, const Link& link) { return link.latency + bytes / link.bandwidth; }

double all_to_all_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency + double(n - 1) / n * bytes / link.bandwidth;
}

RingSeconds ring_attention_seconds(double kv_bytes, double attention_s, int cp, const Link& link) {
  if (cp <= 1) return {};
  const double step = attention_s / cp;
  return {(cp - 1) * std::max(0.0, p2p_seconds(kv_bytes, link) - step),
          (cp - 1) * std::max(0.0, p2p_seconds(2 * kv_bytes, link) - 2 * step) + p2p_seconds(kv_bytes, link)};
}

}  // namespace loom::planner
