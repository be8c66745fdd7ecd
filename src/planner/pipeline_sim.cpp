#include "planner/pipeline_sim.h"

#include <algorithm>
#include <deque>

#include "core/check.h"

namespace loom::planner {

double PipelineTiming::bubble_fraction() const {
  if (makespan <= 0) return 0;
  double busiest = *std::max_element(stage_busy.begin(), stage_busy.end());
  return 1.0 - busiest / makespan;
}

PipelineTiming simulate_pipeline(const pp::Schedule& schedule, int pp, int v, const StageDurations& d) {
  return simulate_pipeline(schedule, pp::ChunkMap{pp, v}, d);
}

PipelineTiming simulate_pipeline(const pp::Schedule& schedule, const pp::ChunkMap& map, const StageDurations& d) {
  using pp::ActionKind;
  const int pp = map.pp, v = map.v, stages = map.virtual_stages();
  LOOM_CHECK(int(schedule.size()) == pp && int(d.forward.size()) == stages && int(d.backward.size()) == stages,
             "pipeline simulation: sizes do not match (pp %d, v %d)", pp, v);
  auto duration = [&](ActionKind kind, int vs) {
    const std::vector<double>* from = kind == ActionKind::Forward          ? &d.forward
                                      : kind == ActionKind::Backward       ? &d.backward
                                      : kind == ActionKind::BackwardInput  ? &d.backward_input
                                                                           : &d.backward_weight;
    LOOM_CHECK(int(from->size()) == stages, "pipeline simulation: no %s durations for a split backward",
               pp::to_string(kind));
    return (*from)[size_t(vs)];
  };
  // channel (is_grad, receiving virtual stage) -> arrival times of messages
  // posted to it, in micro-batch order on both ends.
  std::vector<std::deque<double>> channel(size_t(2 * stages));
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  PipelineTiming out;
  out.stage_finish.assign(pp, 0);
  out.stage_busy.assign(pp, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < pp; s++) {
      const pp::StageSchedule& actions = schedule[s];
      while (next[s] < actions.size()) {
        const pp::Action& a = actions[next[s]];
        const int vs = map.virtual_stage(s, a.chunk);
        if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::RecvGrad) {
          auto& q = channel[size_t((a.kind == ActionKind::RecvGrad) * stages + vs)];
          if (q.empty()) break;  // blocked until the sender posts
          clock[s] = std::max(clock[s], q.front());
          q.pop_front();
        } else if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGrad) {
          const bool grad = a.kind == ActionKind::SendGrad;
          const int to = vs + (grad ? -1 : 1);
          channel[size_t(grad * stages + to)].push_back(clock[s] + d.p2p_seconds);
        } else if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward ||
                   a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight) {
          const double t = duration(a.kind, vs);
          clock[s] += t;
          out.stage_busy[s] += t;
          out.stage_finish[s] = clock[s];
        }
        next[s]++;
        moved = true;
      }
    }
  }
  for (int s = 0; s < pp; s++)
    LOOM_CHECK(next[s] == schedule[s].size(), "pipeline simulation: stage %d deadlocked", s);
  out.makespan = *std::max_element(out.stage_finish.begin(), out.stage_finish.end());
  return out;
}

}  // namespace loom::planner
