// What a caller asks of train() besides the config, by concern: where the
// run goes (production), what a test reads back (probes) and which faults
// are injected (tests and `loom train --fault` demos). TrainOptions joins
// them so a caller fills one object; the loop hands each piece only its part.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fault/fault_plan.h"

namespace loom {

// Tests: what the run keeps for them, and data they shape.
struct TrainProbes {
  // Keep the mean gradient of the first step (before clipping, the whole
  // flat buffer in layout order, gathered from the shards under ZeRO).
  bool keep_first_step_grads = false;
  // Keep the parameters before the first step and after the last.
  bool keep_params = false;
  // Targets to leave out of the loss, by (data step, global batch row,
  // position): the same tokens in every layout (masks as instruction data
  // and padding make them).
  std::function<bool(int64_t step, int row, int t)> target_mask;
  // Packed rows over any data, each token's position in its document by
  // (data step, global batch row, position).
  std::function<int32_t(int64_t step, int row, int t)> document_position;
};

// Where the run writes, what it resumes from and how far it goes.
struct RunControl {
  // Where rank 0 writes the run directory (config, layout, metrics.jsonl,
  // trace.json, summary.json for `loom report`); empty: nowhere.
  std::string run_dir;
  // The cluster the run's prediction is made for (planner::cluster_for_run):
  // a cluster file or preset; empty: this machine's calibration, as many
  // nodes as the run found.
  std::string cluster;
  // "auto": continue from the newest good checkpoint under
  // train.checkpoint_dir (if any); a folder: from that checkpoint; "": fresh.
  std::string resume;
  // Stop after this many steps (as if interrupted; 0 = train.steps).
  int stop_after = 0;
};

// Fault injection: never set by a production run.
struct InjectedFaults {
  // The losses of these data steps read as NaN (bad batches).
  std::vector<int> poison_steps;
  // At these steps, world rank inf_rank (every rank if negative) finds an
  // inf in its gradients.
  std::vector<int> inf_steps;
  int inf_rank = 0;
  // Ranks that die, hang or run slow at given steps (loom train --fault).
  FaultPlan faults;
};

struct TrainOptions : TrainProbes, RunControl, InjectedFaults {};

}  // namespace loom
