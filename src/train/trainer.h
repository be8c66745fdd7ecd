// The single-process training loop: data -> forward/backward -> clip ->
// AdamW with warmup + cosine LR, validation every N steps, one log line per
// logged step.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "config/layout_rules.h"
#include "config/run_config.h"
#include "fault/fault_plan.h"
#include "obs/run_records.h"
#include "parallel/grid/parallel_context.h"

namespace loom {

struct TrainResult {
  std::vector<float> train_losses;  // one per step run (from the resumed step on)
  std::vector<float> grad_norms;    // the global gradient norm, one per step run (before clipping)
  // A mixture of experts, per step run: the step's routing (obs::MoeStepMetrics).
  std::vector<obs::MoeStepMetrics> moe_steps;
  double peak_rss_bytes = 0;        // the largest peak resident set of any rank
  int skipped_steps = 0;            // steps the loss guard skipped
  int empty_steps = 0;              // steps whose global batch had no valid target: nothing updated, loss NaN
  int overflow_steps = 0;           // steps whose gradients held inf/NaN on some rank (mixed precision): skipped
                                    // by the loss scaler, or (when it cannot back off) by the loss guard
  std::vector<float> loss_scales;   // the loss scale each step ran with
  int rollbacks = 0;                // returns to the last checkpoint
  std::vector<float> val_losses;    // one per evaluation
  double tokens_per_s = 0;          // over all steps after the first
  double gflops = 0;                // achieved, same window
  double peak_gflops = 0;           // measured machine peak for the thread count

  // Data parallelism, over the steps after the first: the share of
  // gradient-reduction time (some bucket between its start and completion)
  // during which backward computed (see ReduceTimes), and the mean time per
  // step spent waiting for reductions after backward.
  double reduce_overlap = 0;
  double reduce_wait_ms = 0;
  double reduce_calls_ms = 0;  // per step: inside the calls that start and poll reductions during backward
  double optimizer_ms = 0;     // per step: AdamW (and the all-gather of parameters under ZeRO)
  std::vector<float> bubble;   // pipeline: per stage, the measured share of the step it idled
  // The same from the planner's pipeline simulation of the run's action
  // lists with the measured mean pass times (train/pass_times.h).
  std::vector<float> simulated_bubble;
  int peak_in_flight = 0;      // this stage: most micro-batch activation sets held at once
  double tp_comm_ms = 0;       // per step: waiting on tensor-parallel communication (not hidden)
  double step_ms = 0;          // per step, mean over the steps after the first
  int buckets = 0;
  size_t param_bytes = 0;            // this rank's parameter buffer
  size_t activation_bytes = 0;       // this rank's planned activations (one micro-batch)
  size_t optimizer_state_bytes = 0;  // this rank's AdamW moments
  size_t grad_bytes = 0;             // gradient memory this rank holds after the last step
  std::vector<float> first_step_grads;  // see TrainOptions
  // keep_params: this stage's fp32 parameters at the start and at the end
  // (the layout of first_step_grads).
  std::vector<float> initial_params, final_params;
};

struct TrainOptions {
  // Keep the mean gradient of the first step (before clipping, the whole
  // flat buffer in layout order, gathered from the shards under ZeRO).
  bool keep_first_step_grads = false;
  // Keep the parameters before the first step and after the last (tests).
  bool keep_params = false;
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
  // Fault injection for tests: the losses of these data steps read as NaN
  // (bad batches).
  std::vector<int> poison_steps;
  // Fault injection for tests: at these steps, world rank inf_rank (every
  // rank if negative) finds an inf in its gradients.
  std::vector<int> inf_steps;
  int inf_rank = 0;
  // Tests: targets to leave out of the loss, by (data step, global batch
  // row, position): the same tokens in every layout (masks as instruction
  // data and padding make them).
  std::function<bool(int64_t step, int row, int t)> target_mask;
  // Tests: packed rows over any data, each token's position in its
  // document by (data step, global batch row, position).
  std::function<int32_t(int64_t step, int row, int t)> document_position;
  // Fault injection for tests and demos (loom train --fault): ranks that
  // die, hang or run slow at given steps.
  FaultPlan faults;
};

// Runs the job described by cfg on this rank of ctx's layout; rank 0 logs
// to `log` (nullptr: silent). Data parallel: each replica takes its rows of
// the global batch, in micro-batches whose gradients accumulate; gradients
// are averaged over the dp group bucket by bucket while backward runs, and
// with parallel.zero >= 1 the optimizer state (and gradients) are sharded.
// Throws UserError for problems the user can fix (missing data file, ...).
TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log, const TrainOptions& options = {});


// Applies runtime.threads (0 = all cores) and returns the thread count used.
int set_threads(int requested);

}  // namespace loom
