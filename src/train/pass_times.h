// The pipeline's measured pass times, fed back into the planner's pipeline
// simulation: each virtual stage's mean Forward / Backward / BackwardInput /
// BackwardWeight duration over a run's timed steps, and the bubble per stage
// the simulation then gives for the run's own action lists. Set beside the
// measured bubble it separates the schedule (what the simulation models)
// from what it does not (messages, waits, timer noise).
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "parallel/pp/executor.h"
#include "parallel/pp/pipeline_plan.h"

namespace loom {

class PassTimes {
 public:
  explicit PassTimes(const pp::PipelinePlan& plan);
  // One step's timeline of this rank's stage.
  void add(const pp::StageTimeline& timeline, int stage);
  // Per stage: 1 - its compute / the makespan, simulated with every
  // stage's mean pass times (an all-reduce over the pipeline group `pp`).
  std::vector<float> simulated_bubble(Communicator& pp) const;

 private:
  static constexpr int kKinds = 4;  // Forward, Backward, BackwardInput, BackwardWeight
  const pp::PipelinePlan& plan_;
  std::vector<float> sums_;  // [kind][virtual stage] seconds, then the same layout of counts
};

}  // namespace loom
