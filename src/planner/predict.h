// Predictions for loom's own runs, as `loom train` runs them on this
// machine's CPUs, and the layout chooser `loom train --layout auto` uses.
// The train loop prints the prediction beside what it measures.
//
// Every figure comes from the engine's own plans (docs/planner.md,
// "loom's own runs"): the pipeline plan the trainer builds (partition by
// cost or parallel.pp_layers, schedule, v, micro-batches, each stage's
// action list and the slots each chunk holds: config/run_pipeline.h), each
// chunk's parameter layout (ParamLayout::for_model) and activation plan
// (planned_activation_bytes, any train.recompute), and the ZeRO stage's
// model states (predict.cpp). Time: the configured schedule's own action
// lists simulated with per-chunk durations from each chunk's own blocks.
#pragma once

#include <string>
#include <vector>

#include "config/run_pipeline.h"
#include "config/run_config.h"
#include "planner/cluster.h"
#include "planner/layout.h"

namespace loom::planner {

struct RunPrediction {
  double peak_memory_bytes = 0;  // of the rank that needs the most
  double step_seconds = 0;
  // Memory of that rank.
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activation_bytes = 0, overhead_bytes = 0;
  double checkpoint_bytes = 0;  // the asynchronous save's copy (train.async_checkpoint with checkpoints on)
  // Step time split.
  double compute_seconds = 0;    // forward + backward of every micro-batch at the calibrated rate
  double bubble_seconds = 0;     // pipeline idle time (simulated schedule)
  double comm_seconds = 0;       // tensor-parallel collectives + exposed data-parallel reduction
  double optimizer_seconds = 0;  // zeroing, norm and AdamW: memory-bound
  // The gradient reduction of that stage: its buckets' link time in all,
  // and the part of it the step waits for (the rest hides behind backward).
  double reduce_seconds = 0, reduce_exposed_seconds = 0;
  double reduce_hidden() const { return reduce_seconds > 0 ? 1 - reduce_exposed_seconds / reduce_seconds : 0; }
  // Every pipeline stage's memory per rank (the figures above are the largest's).
  struct Stage {
    double params = 0, grads = 0, optimizer = 0, activations = 0, total = 0;
  };
  std::vector<Stage> stages;
  PipelinePlan plan;  // the trainer's: partition, schedule, its action lists and slots
  // "peak memory per rank 512.3 MiB (params 26.4, grads 26.4, AdamW 52.8, activations 256.7,
  //  overhead 150.0), step 0.412 s (compute 0.380, comm 0.020, optimizer 0.012)"
  std::string describe() const;
};

// The layout in cfg.parallel (dp = 0: world / (tp x pp)) on `world_size`
// ranks of `cluster` (a calibrated local cluster: one device per core).
RunPrediction predict_loom_run(const RunConfig& cfg, int world_size, const ClusterSpec& cluster);

// .cache/cluster-local.toml under the project root if `loom bench calibrate`
// wrote it, else the automatic calibration for every core
// (auto_calibration_path) if a run took it, else this machine measured
// quickly (fp32 peak of every core for 50 ms; memory from /proc/meminfo;
// defaults for the rest, see local_cluster.cpp).
ClusterSpec local_cluster_or_default();
// Where `loom train` keeps the calibration it takes automatically (`loom
// bench calibrate --quick --threads N`) for runs of `threads` threads:
// ROOT/.cache/calibration/<key>.toml, the key a hash of the CPU's model, the
// kernels' ISA, the thread count and this loom executable (size and time:
// a new build measures again, its kernels may have changed).
std::string auto_calibration_path(const std::string& root, int threads);
// The cluster a run's own prediction uses: the cluster file `name_or_path`
// as it is (`loom train --cluster`, e.g. the emulated cluster `loom bench
// cluster` writes), or, when empty, local_cluster_or_default() as one of
// `nodes` identical nodes (the nodes the run found at start-up, NodeMap):
// each node has this machine's cores, and groups that span nodes use its
// [inter_node] link (calibrate it on the cluster: `loom bench calibrate --mpi`
// under the job's mpirun).
// threads > 0: the run's threads per rank; without `loom bench calibrate`'s
// file, the automatic calibration for that many threads is preferred (a
// rank of N threads reaches its own share of the peak).
ClusterSpec cluster_for_run(const std::string& name_or_path, int nodes, int threads = 0);
// This machine's physical memory (MemTotal), 0 if unknown.
double machine_memory_bytes();
// UserError (before anything is allocated) when the run's predicted memory
// per rank, without the process overhead, is more than this machine's
// memory shared by the ranks_on_node ranks running on it, naming the figures.
void check_fits_this_machine(const RunConfig& cfg, int world_size, int ranks_on_node);
// The same, measured now (no file read); `calibrate` adds measured
// efficiency and bandwidths on top of it.
ClusterSpec measure_local_cluster_quickly();
// bf16 products' speed against fp32's on this CPU: native with avx512_bf16,
// widened to fp32 elsewhere (the local cluster's bf16 peak).
double bf16_speedup_of_this_cpu();

// Whether --layout auto proposes parallel.zero = 3 (the engine runs it:
// parallel/zero/param_gather.h).
constexpr bool kEngineRunsZero3 = true;

// The memory each of world_size ranks has when they share the cluster's
// nodes evenly (ranks of one node share its memory).
double memory_budget_per_rank(const ClusterSpec& cluster, int world_size);

// What choose_layout may propose beyond ZeRO 0-2 and recomputation.
struct LayoutSearch {
  bool zero3 = kEngineRunsZero3;  // ZeRO-3 where dp > 1
};

// The fastest layout loom can run for cfg on world_size ranks (n_head,
// kv heads and the MLP width divisible by tp, pp <= n_layer, batch divisible
// by dp x micro-batch, the config's schedule and chunks; ZeRO 0-2, and 3
// when dp > 1 and search.zero3; recomputation none, selective or full) whose
// ranks fit the machine's memory together. Recomputation costs time, so it
// is chosen only where nothing faster fits. train.micro_batch_size, when
// set, is kept; the chunks, sequence parallelism and precision are the
// config's. with_layout(cfg, chosen) (layout.h) is the run. Throws
// UserError if no layout fits, saying how much memory is missing.
Layout choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster, LayoutSearch search = {});

}  // namespace loom::planner
