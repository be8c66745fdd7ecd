// Published training runs the planner is checked against (issue 38): each
// row's model, cluster and the layout its authors ran, with the throughput
// they reported. The planner times that very layout; the ratio of its
// TFLOP/s per GPU to the published one is the check (`loom bench planner
// --published`). The rows check the model; nothing is fitted to them.
#pragma once

#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/layout.h"

namespace loom::planner {

struct PublishedRun {
  std::string name;       // "1.7B"
  Workload workload;      // the model (GPT family) and global batch in sequences
  Layout layout;          // the published layout (dp = GPUs / (tp pp))
  double tflops_per_gpu;  // the published throughput
  double flops_per_step;  // the paper's own FLOP count per step
};

// Narayanan et al. 2021 (SC21, "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM"), Table 1: sequence 2048,
// vocabulary 51,200, A100 80 GB SXM nodes of 8 (NVLink, 8 x 200 Gb/s
// InfiniBand: the a100-80gb preset), fp16, full recomputation, no ZeRO, no
// sequence parallelism, Megatron's fp32 gradient accumulation. Heads,
// micro-batch and interleaving from NVIDIA's run script for the table
// (Megatron-LM examples/sc21/). FLOPs per step: the paper's eq. 3,
// 96 B s l h^2 (1 + s / 6h + V / 16lh), which counts the recomputed forward.
std::vector<PublishedRun> narayanan_2021_runs();

// The planner's TFLOP/s per GPU for the run's layout on `nodes` (whole nodes
// of the cluster, as many as the run's GPUs need), by the paper's FLOP count.
double predicted_tflops_per_gpu(const PublishedRun& run, const ClusterSpec& nodes);

}  // namespace loom::planner
