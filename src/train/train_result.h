// What train() measured and kept, by concern. TrainResult joins them.
#pragma once

#include <cstddef>
#include <vector>

#include "obs/run_records.h"

namespace loom {

// Step by step: the losses and what was done with each step.
struct LossRecord {
  std::vector<float> train_losses;  // one per step run (from the resumed step on)
  std::vector<float> grad_norms;    // the global gradient norm, one per step run (before clipping)
  // A mixture of experts, per step run: the step's routing (obs::MoeStepMetrics).
  std::vector<obs::MoeStepMetrics> moe_steps;
  int skipped_steps = 0;            // steps the loss guard skipped
  int empty_steps = 0;              // steps whose global batch had no valid target: nothing updated, loss NaN
  int overflow_steps = 0;           // steps whose gradients held inf/NaN on some rank (mixed precision): skipped
                                    // by the loss scaler, or (when it cannot back off) by the loss guard
  std::vector<float> loss_scales;   // the loss scale each step ran with
  int rollbacks = 0;                // returns to the last checkpoint
  std::vector<float> val_losses;    // one per evaluation
};

// Speed, over the steps after the first.
struct SpeedRecord {
  double tokens_per_s = 0;
  double gflops = 0;       // achieved
  double peak_gflops = 0;  // measured machine peak for the thread count
  double optimizer_ms = 0;  // per step: AdamW (and the all-gather of parameters under ZeRO)
  double step_ms = 0;       // per step, mean
};

// Communication and the pipeline, over the steps after the first.
struct CommRecord {
  // Data parallelism: the share of gradient-reduction time (some bucket
  // between its start and completion) during which backward computed (see
  // ReduceTimes), and the mean time per step spent waiting for reductions
  // after backward.
  double reduce_overlap = 0;
  double reduce_wait_ms = 0;
  // Per step, the least wait over the data ranks: the reduction's own tail
  // after the last rank's backward. The rest of a rank's wait was spent
  // waiting for a slower rank (one whose backward ended later).
  double reduce_tail_ms = 0;
  double reduce_calls_ms = 0;  // per step: inside the calls that start and poll reductions during backward
  int buckets = 0;
  std::vector<float> bubble;   // pipeline: per stage, the measured share of the step it idled
  // The same from the planner's pipeline simulation of the run's action
  // lists with the measured mean pass times (train/pass_times.h).
  std::vector<float> simulated_bubble;
  int peak_in_flight = 0;      // this stage: most micro-batch activation sets held at once
  double tp_comm_ms = 0;       // per step: waiting on tensor-parallel communication (not hidden)
  double gather_wait_ms = 0;   // ZeRO-3, per step: waiting for parameter gathers (each started a segment ahead)
};

// Memory.
struct MemoryRecord {
  double peak_rss_bytes = 0;         // the largest peak resident set of any rank
  size_t param_bytes = 0;            // this rank's parameter buffer
  size_t activation_bytes = 0;       // this rank's planned activations (one micro-batch)
  size_t optimizer_state_bytes = 0;  // this rank's AdamW moments
  size_t grad_bytes = 0;             // gradient memory this rank holds after the last step
};

// What TrainProbes asked to keep.
struct ProbeRecord {
  std::vector<float> first_step_grads;  // TrainProbes::keep_first_step_grads
  // keep_params: this stage's fp32 parameters at the start and at the end
  // (the layout of first_step_grads).
  std::vector<float> initial_params, final_params;
};

struct TrainResult : LossRecord, SpeedRecord, CommRecord, MemoryRecord, ProbeRecord {};

}  // namespace loom
