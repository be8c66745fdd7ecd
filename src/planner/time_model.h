// Step time of a layout: compute at the cluster's calibrated efficiency,
// tensor-parallel collectives inside each layer, pipeline messages and the
// bubble from simulating the schedule IR, the data-parallel reduction (and
// how much of it hides behind the last backward), and the optimizer step.
#pragma once

#include <map>
#include <vector>

#include "planner/cluster.h"
#include "planner/comm_cost.h"
#include "planner/layout.h"
#include "planner/pipeline_sim.h"

namespace loom::planner {

struct StepTime {
  double step = 0;              // seconds per optimizer step
  double compute = 0;           // busiest stage's Forward/Backward compute, no communication
  double tp_comm = 0;           // busiest stage's tensor-parallel collectives (not overlapped)
  double cp_comm = 0;           // busiest stage's ring-attention transfers not hidden behind attention
  double ep_comm = 0;           // busiest stage's expert all-to-alls (expert parallelism; not overlapped)
  double pp_comm = 0;           // pipeline messages on the critical path (estimate: 2 (pp v - 1) messages)
  double zero3_comm = 0;        // ZeRO-3 parameter gathers not hidden behind compute
  double zero3_total = 0;       // all ZeRO-3 gathers and reduce-scatters of the busiest stage
  double bubble = 0;            // pipeline idle time of the busiest stage
  double dp_comm = 0;           // data-parallel reduction (+ ZeRO parameter all-gather), all of it
  double dp_exposed = 0;        // the part not hidden behind backward
  double optimizer = 0;         // memory-bound AdamW update
  double bubble_fraction = 0;   // from the simulated schedule
  double tokens_per_s = 0;
  double mfu = 0;               // model FLOPs / (step x devices x peak of the precision)
  // Hardware FLOPs utilisation: with the recomputed forward counted too
  // (full: every block's; selective: the attention core's); = mfu without.
  double hfu = 0;
  GroupLinks links;
};

// Remembers simulated schedules: many layouts share (pp, m, v, durations).
class PipelineTimer {
 public:
  PipelineTiming time(pp::ScheduleKind kind, int pp, int m, int v, const StageDurations& d,
                      const pp::PassRatios& ratios = {});
  size_t simulations() const { return cache_.size(); }

 private:
  std::map<std::vector<double>, PipelineTiming> cache_;
};

// `links`: group_links(c, l.dp, l.tp, l.pp), passed in so a search computes it once per grid.
StepTime step_time(const Workload& w, const Layout& l, const ClusterSpec& c, const GroupLinks& links,
                   PipelineTimer& timer);
StepTime step_time(const Workload& w, const Layout& l, const ClusterSpec& c);
// A bound no slower than step_time() (no bubble, no pipeline messages), for pruning.
double step_time_lower_bound(const Workload& w, const Layout& l, const ClusterSpec& c, const GroupLinks& links);

}  // namespace loom::planner
