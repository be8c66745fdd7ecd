#include "train/pass_times.h"

#include "planner/pipeline_sim.h"

namespace loom {
namespace {

int kind_index(pp::ActionKind kind) {
  switch (kind) {
    case pp::ActionKind::Forward: return 0;
    case pp::ActionKind::Backward: return 1;
    case pp::ActionKind::BackwardInput: return 2;
    case pp::ActionKind::BackwardWeight: return 3;
    default: return -1;
  }
}

}  // namespace

PassTimes::PassTimes(const pp::PipelinePlan& plan)
    : plan_(plan), sums_(size_t(2 * kKinds * plan.virtual_stages()), 0.f) {}

void PassTimes::add(const pp::StageTimeline& timeline, int stage) {
  const size_t n = size_t(kKinds * plan_.virtual_stages());
  for (const pp::TimedAction& t : timeline.actions) {
    const int k = kind_index(t.action.kind);
    if (k < 0) continue;
    const size_t at = size_t(k * plan_.virtual_stages() + plan_.map().virtual_stage(stage, t.action.chunk));
    sums_[at] += float(t.end - t.start);
    sums_[n + at] += 1.f;
  }
}

std::vector<float> PassTimes::simulated_bubble(Communicator& pp) const {
  std::vector<float> all = sums_;
  if (pp.size() > 1) pp.all_reduce(all.data(), all.size(), DType::f32, ReduceOp::Sum);
  const int stages = plan_.virtual_stages();
  const size_t n = size_t(kKinds * stages);
  planner::StageDurations d;
  std::vector<double>* kinds[kKinds] = {&d.forward, &d.backward, &d.backward_input, &d.backward_weight};
  for (int k = 0; k < kKinds; k++)
    for (int vs = 0; vs < stages; vs++) {
      const size_t at = size_t(k * stages + vs);
      kinds[k]->push_back(all[n + at] > 0 ? all[at] / all[n + at] : 0.0);
    }
  const planner::PipelineTiming t = planner::simulate_pipeline(plan_.actions, plan_.map(), d);
  std::vector<float> bubble;
  for (int s = 0; s < plan_.pp; s++)
    bubble.push_back(t.makespan > 0 ? float(1.0 - t.stage_busy[size_t(s)] / t.makespan) : 0.f);
  return bubble;
}

}  // namespace loom
