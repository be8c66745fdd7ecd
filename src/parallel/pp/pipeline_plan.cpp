#include "parallel/pp/pipeline_plan.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/check.h"
#include "parallel/pp/partition.h"

namespace loom::pp {

int PipelinePlan::first_layer(int vs) const {
  int first = 0;
  for (int i = 0; i < vs; i++) first += layers[size_t(i)];
  return first;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved1F1B;
  throw UserError(strprintf("config field 'parallel.schedule' is '%s'; expected \"1f1b\", \"gpipe\" or \"interleaved\"",
                            name.c_str()));
}

PipelinePlan plan_pipeline(const std::string& schedule, int v, const std::vector<int>& pp_layers, int n_layer,
                           int pp, double head_blocks, int micro_batches) {
  PipelinePlan plan;
  plan.schedule = parse_schedule_kind(schedule);
  plan.pp = pp, plan.v = v, plan.micro_batches = micro_batches;
  const int parts = pp * v;
  if (!pp_layers.empty()) {
    check_partition(pp_layers, n_layer, parts);
    plan.layers = pp_layers;
  } else {
    plan.layers = balanced_partition(n_layer, parts, 0.0, head_blocks);
  }
  if (micro_batches > 0) {
    plan.actions = build_schedule(plan.schedule, pp, micro_batches, v);
    for (const StageSchedule& stage : plan.actions) plan.slots.push_back(slots_needed(stage, v));
  }
  return plan;
}

std::vector<int> slots_needed(const StageSchedule& actions, int v) {
  std::set<std::pair<int, int>> sends_grad, held;
  for (const Action& a : actions)
    if (a.kind == ActionKind::SendGrad) sends_grad.insert({a.microbatch, a.chunk});
  std::vector<int> now(size_t(v), 0), peak(size_t(v), 0);
  for (const Action& a : actions) {
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if ((a.kind == ActionKind::RecvActivation || a.kind == ActionKind::Forward) && held.insert(key).second)
      peak[size_t(a.chunk)] = std::max(peak[size_t(a.chunk)], ++now[size_t(a.chunk)]);
    const bool releases = a.kind == ActionKind::SendGrad || (a.kind == ActionKind::Backward && !sends_grad.count(key));
    if (releases && held.erase(key)) now[size_t(a.chunk)]--;
  }
  for (int& p : peak) p = std::max(p, 1);
  return peak;
}

}  // namespace loom::pp
