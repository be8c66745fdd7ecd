#include "parallel/pp/pipeline_plan.h"

#include <algorithm>
#include <map>
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
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::ZeroBubbleV;
  throw UserError(strprintf("config field 'parallel.schedule' is '%s'; expected \"1f1b\", \"gpipe\", "
                            "\"interleaved\", \"zb-h1\" or \"zb-v\"",
                            name.c_str()));
}

PipelinePlan plan_pipeline(const std::string& schedule, int v, const std::vector<int>& pp_layers, int n_layer,
                           int pp, double head_blocks, int micro_batches, const PassRatios& ratios) {
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
  // Fewer micro-batches than stages leave nothing to fill the bubble with.
  const bool zero_bubble = plan.schedule == ScheduleKind::ZeroBubbleH1 || plan.schedule == ScheduleKind::ZeroBubbleV;
  if (zero_bubble && pp > 1 && micro_batches > 0 && micro_batches < pp)
    throw UserError(strprintf(
        "parallel.schedule = \"%s\" needs at least parallel.pp = %d micro-batches per step; got %d = "
        "train.batch_size / (parallel.dp x train.micro_batch_size): raise train.batch_size or lower "
        "train.micro_batch_size",
        schedule.c_str(), pp, micro_batches));
  if (micro_batches > 0) {
    plan.actions = build_schedule(plan.schedule, pp, micro_batches, v, ratios);
    for (const StageSchedule& stage : plan.actions) {
      plan.slots.push_back(slots_needed(stage, v));
      plan.shared_slots.push_back(shared_slots_needed(stage));
    }
  }
  return plan;
}

std::map<std::pair<int, int>, size_t> last_actions(const StageSchedule& actions) {
  std::map<std::pair<int, int>, size_t> last;
  for (size_t i = 0; i < actions.size(); i++)
    if (actions[i].microbatch >= 0) last[{actions[i].microbatch, actions[i].chunk}] = i;
  return last;
}

int shared_slots_needed(const StageSchedule& actions) {
  const auto last = last_actions(actions);
  std::set<std::pair<int, int>> held;
  int peak = 0;
  for (size_t i = 0; i < actions.size(); i++) {
    const Action& a = actions[i];
    if (a.microbatch < 0) continue;
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (held.insert(key).second) peak = std::max(peak, int(held.size()));
    if (last.at(key) == i) held.erase(key);
  }
  return std::max(peak, 1);
}

std::vector<int> slots_needed(const StageSchedule& actions, int v) {
  const auto last = last_actions(actions);
  std::set<std::pair<int, int>> held;
  std::vector<int> now(size_t(v), 0), peak(size_t(v), 0);
  for (size_t i = 0; i < actions.size(); i++) {
    const Action& a = actions[i];
    if (a.microbatch < 0) continue;
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (held.insert(key).second) peak[size_t(a.chunk)] = std::max(peak[size_t(a.chunk)], ++now[size_t(a.chunk)]);
    if (last.at(key) == i && held.erase(key)) now[size_t(a.chunk)]--;
  }
  for (int& p : peak) p = std::max(p, 1);
  return peak;
}

}  // namespace loom::pp
