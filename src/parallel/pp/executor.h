// PipelineExecutor: runs one stage's action list (schedule.h) for one
// training step, with non-blocking MPI point-to-point transfers.
//
// Receives are posted when the schedule reaches them and waited on only by
// the Forward / Backward that needs them; sends are posted right after the
// compute that produced them and waited on only before their buffer is
// reused, so transfers overlap computation. A (micro-batch, chunk) holds an
// activation slot from its first action until its Backward is done and its
// gradient sent (and, when split, its BackwardWeight run); the schedule's
// in-flight bound is how many slots a chunk needs (GPipe: m, 1F1B:
// pp - stage, ZB-H1: pp).
//
// parallel/ knows nothing of the model: the stage's chunks are driven
// through StageModel, which the training loop implements.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/pp/schedule.h"

namespace loom::pp {

class StageModel {
 public:
  virtual ~StageModel() = default;
  // Runs the micro-batch's forward / backward on `chunk`, in activation slot `slot`.
  virtual void forward(int microbatch, int chunk, int slot) = 0;
  virtual void backward(int microbatch, int chunk, int slot) = 0;
  // Zero-bubble schedules: backward's input part, then later its weight part.
  virtual void backward_input(int microbatch, int chunk, int slot) = 0;
  virtual void backward_weight(int microbatch, int chunk, int slot) = 0;
  // Transfer buffers of (chunk, slot), activation_floats() each: where a
  // received activation goes, the activation to send, and the gradient
  // buffer (received before backward, sent after it).
  virtual float* activation_in(int chunk, int slot) = 0;
  virtual const float* activation_out(int chunk, int slot) = 0;
  virtual float* grad(int chunk, int slot) = 0;
  virtual size_t activation_floats() const = 0;
  // Called around each wait for a neighbour's activation or gradient (the
  // bubble), e.g. to trace it.
  virtual void waiting(bool begins) {}
};

// When each compute action ran on this rank, in seconds from the step's start.
struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct StageTimeline {
  std::vector<TimedAction> actions;  // the compute actions (Forward, Backward or its two parts), in order
  double span = 0;                   // the step's start to the last action's end on any stage
  double compute = 0;                // sum of their durations
  int peak_in_flight = 0;            // most (micro-batch, chunk) activation sets held at once
  // The share of the pipeline's span this stage did not compute: waiting on
  // the other stages, or done before them.
  double bubble() const { return span > 0 ? 1.0 - compute / span : 0; }
};

class PipelineExecutor {
 public:
  // pp: the pipeline group (its rank is this stage); slots[c] activation
  // sets for chunk c (slots_needed gives them); map: which virtual stage
  // each chunk is (a V-shaped map sends between a stage's own chunks too);
  // shared_slots: slot k is the same memory in every chunk (the chunks
  // share their activation sets, as many each), so a slot is given to one
  // (micro-batch, chunk) of the whole stage at a time.
  PipelineExecutor(Communicator& pp, std::vector<int> slots, ChunkMap map, bool shared_slots = false);

  // How many activation sets each of the v chunks needs to run `actions`
  // (pp::slots_needed in pipeline_plan.h, which the planner also reads).
  static std::vector<int> slots_needed(const StageSchedule& actions, int v);

  // Runs the step's actions up to (not including) ReduceGrads / OptimizerStep.
  void run(const StageSchedule& actions, StageModel& model);
  const StageTimeline& timeline() const { return timeline_; }

 private:
  struct Key {
    int microbatch, chunk;
  };
  int slot_of(int microbatch, int chunk, bool allocate);
  void release(int microbatch, int chunk);
  // Before (chunk, slot)'s gradient buffer is written again: its last send done.
  void reuse_grad_buffer(int chunk, int slot);
  int tag(int microbatch, int chunk, bool grad) const;

  Communicator& pp_;
  int v_;
  ChunkMap map_;
  bool shared_;
  std::vector<int> slots_;
  // Per chunk, per slot: the micro-batch that holds it (-1: free), and the
  // transfers in flight on it.
  std::vector<std::vector<int>> holder_;
  std::vector<std::vector<std::unique_ptr<Work>>> recv_, send_out_, send_grad_;
  StageTimeline timeline_;
};

}  // namespace loom::pp
