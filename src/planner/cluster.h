// A cluster as the planner sees it: identical nodes of identical devices, a
// fast link inside a node and a network between nodes.
//
// Units inside the program are SI: bytes, seconds, FLOP/s, bytes/s. The TOML
// file uses the units vendors quote (GiB, TFLOP/s, GB/s, Gb/s, microseconds);
// see configs/clusters/*.toml and docs/planner.md.
#pragma once

#include <string>

#include "planner/layout.h"

namespace loom::planner {

struct ClusterSpec {
  std::string name;
  std::string description;
  int nodes = 1;
  int devices_per_node = 1;
  double memory_bytes = 0;          // per device
  double peak_flops_fp32 = 0;       // per device, dense
  double peak_flops_bf16 = 0;       // 0: not supported
  double peak_flops_fp16 = 0;
  double matmul_efficiency = 0.5;   // share of peak a training step's GEMMs reach (calibrated)
  double memory_bandwidth = 0;      // per device, for the memory-bound optimizer step
  double overhead_bytes = 0;        // per device: runtime, context, allocator slack
  double intra_bandwidth = 0;       // per device, one direction, inside a node
  double intra_latency = 0;
  double inter_bandwidth = 0;       // per node (all its NICs), one direction
  double inter_latency = 0;

  int devices() const { return nodes * devices_per_node; }
  double peak_flops(ComputePrecision p) const;
  // Throws UserError naming the field (from `origin`) if anything is unusable.
  void validate(const std::string& origin) const;
  std::string to_toml() const;
};

// The same nodes, as many as `devices` needs; fewer devices than one node
// holds is one partly used node. UserError unless whole nodes are used.
ClusterSpec with_devices(ClusterSpec c, int devices);

// Parses a cluster TOML document; `origin` names it in messages.
ClusterSpec parse_cluster_toml(const std::string& text, const std::string& origin);
ClusterSpec load_cluster_file(const std::string& path);
// A preset name (configs/clusters/NAME.toml under `root`; "local" is
// ROOT/.cache/cluster-local.toml written by `loom bench calibrate`) or a path
// to a .toml file. Throws UserError listing the presets if nothing matches.
ClusterSpec load_cluster(const std::string& name_or_path, const std::string& root);
std::string cluster_preset_names(const std::string& root);
// Where configs/ lives: $LOOM_HOME, else the source tree this was built from.
std::string default_root();
std::string local_cluster_path(const std::string& root);

}  // namespace loom::planner
