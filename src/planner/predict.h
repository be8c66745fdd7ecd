// Predictions for loom's own runs, as `loom train` runs them on this
// machine's CPUs: fp32 or precision.compute, no recomputation, one process
// per rank. The train loop prints these beside what it measures.
//
// Memory follows loom's own allocations (model/transformer_stage.cpp and the
// family's block plan in model/gpt2/ or model/llama/, train/replica.cpp):
// fp32 parameters (4 B, + 2 B for the 16-bit compute copy in bf16 / fp16;
// activations then 2 B where the model stores them in 16 bits), one fp32 gradient buffer (4 B; ZeRO-2 keeps only a
// 1/dp shard outside backward unless micro-batches accumulate), AdamW moments
// (8 B, 1/dp under ZeRO >= 1), every activation of one micro-batch planned up
// front (norms and residuals on 1/tp of the tokens under sequence
// parallelism), the backward work space, and a fixed per-process overhead.
#pragma once

#include <string>

#include "config/run_config.h"
#include "planner/cluster.h"

namespace loom::planner {

struct RunPrediction {
  double peak_memory_bytes = 0;  // of the rank that needs the most
  double step_seconds = 0;
  // Memory of that rank.
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activation_bytes = 0, overhead_bytes = 0;
  // Step time split.
  double compute_seconds = 0;    // forward + backward of every micro-batch at the calibrated rate
  double bubble_seconds = 0;     // pipeline idle time (simulated schedule)
  double comm_seconds = 0;       // tensor-parallel collectives + exposed data-parallel reduction
  double optimizer_seconds = 0;  // zeroing, norm and AdamW: memory-bound
  // "peak memory per rank 512.3 MiB (params 26.4, grads 26.4, AdamW 52.8, activations 256.7,
  //  overhead 150.0), step 0.412 s (compute 0.380, comm 0.020, optimizer 0.012)"
  std::string describe() const;
};

// The layout in cfg.parallel (dp = 0: world / (tp x pp)) on `world_size`
// ranks of `cluster` (a calibrated local cluster: one device per core).
RunPrediction predict_loom_run(const RunConfig& cfg, int world_size, const ClusterSpec& cluster);

// .cache/cluster-local.toml under the project root if `loom bench calibrate`
// wrote it, else this machine measured quickly (fp32 peak of every core for
// 50 ms; memory from /proc/meminfo; defaults for the rest, see predict.cpp).
ClusterSpec local_cluster_or_default();
// The same, measured now (no file read); `calibrate` adds measured
// efficiency and bandwidths on top of it.
ClusterSpec measure_local_cluster_quickly();
// bf16 products' speed against fp32's on this CPU: native with avx512_bf16,
// widened to fp32 elsewhere (the local cluster's bf16 peak).
double bf16_speedup_of_this_cpu();

// The fastest layout loom can run for cfg on world_size ranks (fp32, ZeRO
// 0-2, n_head % tp == 0, pp <= n_layer, batch divisible by dp x
// micro-batch) whose ranks fit the machine's memory together. Fields other
// than dp, tp, pp, zero are copied from cfg.parallel; train.micro_batch_size
// is left as cfg has it (choose_micro_batch gives the chosen one).
// Throws UserError if no layout fits, saying how much memory is missing.
ParallelConfig choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster);
// The same search, also returning the micro-batch size it picked.
ParallelConfig choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster, int* micro_batch);

}  // namespace loom::planner
