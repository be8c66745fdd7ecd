// Alpha-beta (latency + bytes / bandwidth) costs of ring collectives on the
// link a group actually uses.
//
// Which link a group uses follows from the rank order (ParallelGrid, tp
// innermost): ranks fill a node before the next one, so a group whose
// members all sit on one node talks over the intra-node link; otherwise its
// ring crosses the network, whose per-node bandwidth is shared by every
// group of that kind leaving the node at the same time.
#pragma once

#include <string>

#include "planner/cluster.h"

namespace loom::planner {

struct Link {
  double bandwidth = 0;  // bytes/s one ring gets on its slowest hop
  double latency = 0;    // seconds per step of the ring
  bool crosses_nodes = false;
  // Crossing nodes: the group's members on one node, and that node's own
  // link (for the hierarchical sum's stages inside the node).
  int on_node = 1;
  double node_bandwidth = 0, node_latency = 0;
};

struct GroupLinks {
  Link tp, dp, pp, cp;  // dp: the data group (dp x cp ranks)
  Link ep, expert_dp;   // expert parallelism: the all-to-all's group, the experts' reduction group
};

// Links of the tp, dp, pp and cp groups of a dp x tp x pp x cp grid in
// `order` (parallel.order; cp sits after tp unless named) laid over the
// cluster's nodes in rank order, ceil(world / nodes) ranks on each (as
// predict_loom_run counts the cores a rank has): a search's whole nodes, or
// a run's ranks per node.
GroupLinks group_links(const ClusterSpec& cluster, int dp, int tp, int pp, int cp = 1,
                       const std::string& order = "tp-dp-pp", int ep = 1);

// Ring algorithms on n members; `bytes` is the whole buffer (each member's
// full input for all_reduce, the gathered result for all_gather and the
// input of reduce_scatter).
double all_reduce_seconds(double bytes, int n, const Link& link);
// The hierarchical sum (comm/hierarchical_comm.h): a reduce inside each
// node, an all-reduce between one member per node, a broadcast inside each
// node; the flat all-reduce where the group does not cross nodes with more
// than one member on a node.
double hierarchical_all_reduce_seconds(double bytes, int n, const Link& link);
double reduce_scatter_seconds(double bytes, int n, const Link& link);
double all_gather_seconds(double bytes, int n, const Link& link);
double p2p_seconds(double bytes, const Link& link);
// All-to-all on n members, each sending `bytes` in all (an even 1 / n to
// each member, itself included): pairwise exchange, n - 1 rounds.
double all_to_all_seconds(double bytes, int n, const Link& link);

// Ring attention (parallel/cp/ring_attention.h) over cp ranks, per layer:
// forward passes cp - 1 fp32 key/value blocks of kv_bytes, each arriving
// while the one before is attended (1 / cp of the layer's attention compute,
// attention_s); backward passes them again with their gradients, and a last
// turn brings each block's gradient home. What the compute does not hide.
struct RingSeconds {
  double forward = 0, backward = 0;
};
RingSeconds ring_attention_seconds(double kv_bytes, double attention_s, int cp, const Link& link);

}  // namespace loom::planner
