// The training loop proper: one step after another from where the run
// resumed, each step a sequence of small parts (read the batch, forward and
// backward, judge the loss, update, log, evaluate, roll back or checkpoint,
// record), plus the totals the run's summary is made of.
#pragma once

#include <chrono>
#include <cstdio>
#include <vector>

#include "config/run_config.h"
#include "obs/run_records.h"
#include "obs/straggler_monitor.h"
#include "optim/lr_schedule.h"
#include "parallel/grid/parallel_context.h"
#include "train/checkpointing.h"
#include "train/loss_guard.h"
#include "train/pass_times.h"
#include "train/replica.h"
#include "train/run_recorder.h"
#include "train/run_shape.h"
#include "train/step_batch.h"
#include "train/train_options.h"
#include "train/train_result.h"

namespace loom {

// Time totals over the run (the first step warms up caches and primitives:
// "timed" leaves it out, unless it is the only step).
struct LoopTimes {
  double timed_s = 0, optimizer_s = 0;
  int timed_steps = 0;
  double data_s = 0, step_s = 0;  // reading batches, within whole steps (every step)
  ReduceTimes warm_up;            // the reductions of the first step, left out of the overlap figures
  double tp_comm_warm_up = 0, tp_comm_eval = 0;  // tensor-parallel waits in the first step / in evaluations
  double gather_warm_up = 0, gather_eval = 0;    // ZeRO-3 gather waits, the same
  std::vector<double> bubble_sum;                // pipeline: per stage, over the timed steps
  std::vector<float> reduce_wait_s;              // per timed step: this rank's wait after backward
};

class StepLoop {
 public:
  struct Parts {  // what the loop works with; each outlives it
    const RunConfig& cfg;
    const ParallelContext& ctx;
    const TrainOptions& options;
    const RunShape& shape;
    TokenSource& data;
    Replica& replica;
    TrainCheckpoints& checkpoints;
    RunRecorder& recorder;
  };
  StepLoop(const Parts& parts, TrainPosition position, double flops_per_step, TrainResult& result, FILE* log);

  // Runs the steps from the resumed one to train.steps (or stop_after).
  void run();
  const LoopTimes& times() const { return times_; }
  const PassTimes& pass_times() const { return pass_times_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Step;  // one step's facts, as its parts find them (step_loop.cpp)

  int run_step(int step);  // returns the next step (a rollback goes back)
  void read_batch(Step& s);
  void forward_backward(Step& s);
  void judge(Step& s);
  void apply(Step& s);
  void account(Step& s);
  void print_step(const Step& s);
  void evaluate_if_due(Step& s);
  bool roll_back(Step& s, int& next);
  void record(const Step& s);

  const Parts run_;
  TrainResult& result_;
  FILE* log_;
  const double flops_per_step_;
  TrainPosition position_;
  StepBatch batch_;
  LossGuard guard_;
  LrSchedule schedule_;
  obs::StragglerMonitor stragglers_;
  PassTimes pass_times_;
  LoopTimes times_;
  int first_step_ = 0, end_step_ = 0;
  double window_s_ = 0;  // since the last logged step
  int window_steps_ = 0;
  double tp_comm_before_ = 0, wait_before_ = 0;  // totals at the previous step's end
};

}  // namespace loom
