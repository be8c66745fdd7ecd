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
  // The GEMM model (planner/work_model.h): the share of peak a large,
  // aligned GEMM reaches; tile and wave quantisation over `gemm_units`
  // processors (0: none); the K and min(M, N) at which short reductions and
  // skinny outputs halve the rate (0: no penalty).
  double matmul_efficiency = 0.5;
  int gemm_units = 0;
  int gemm_tile_m = 1, gemm_tile_n = 1;
  double gemm_k_half = 0, gemm_mn_half = 0;
  // Share of peak the tiled (flash-style) attention kernel reaches on its
  // causal work, forward and backward (measured on CPUs; 0: priced as GEMMs).
  double tiled_attention_efficiency = 0;
  double memory_bandwidth = 0;      // per device, for the memory-bound work
  double memory_efficiency = 1;     // share of memory_bandwidth streaming kernels reach
  double overhead_bytes = 0;        // per device: runtime, context, allocator slack
  double intra_bandwidth = 0;       // per device, one direction, inside a node
  double intra_latency = 0;
  double inter_bandwidth = 0;       // per node (all its NICs), one direction
  double inter_latency = 0;
  // Share of the nominal link bandwidth a large collective reaches (NCCL's
  // bus bandwidth over the link's): inside a node and across nodes.
  double intra_efficiency = 1, inter_efficiency = 1;
  // loom's runs: the share of backward during which a gradient reduction
  // across nodes moves (MPI over TCP moves a non-blocking operation mainly
  // inside MPI calls, which backward makes only between blocks; the socket
  // buffers carry some on their own). 0: none hides. `loom bench cluster`
  // measures it; inside a node the whole of backward counts.
  double inter_overlap = 0;
  // The same share for runs with the progress thread (runtime.progress_thread),
  // which moves the reduction between backward's MPI calls: measured apart
  // (`loom bench cluster --progress on`); 0 until measured.
  double inter_overlap_progress = 0;

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
