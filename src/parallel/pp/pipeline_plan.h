// The pipeline plan of a run: which schedule, how many chunks per stage,
// which blocks each chunk holds, how many micro-batches a step runs, each
// stage's action list and how many activation sets each chunk must hold.
//
// The one place both the trainer (train/replica.cpp) and the planner
// (planner/predict.cpp) get these from, so what the planner predicts is
// what the executor runs. Plain values only: parallel/ knows no config and
// no model (config/run_pipeline.h makes one from a RunConfig).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/pp/schedule.h"

namespace loom::pp {

struct PipelinePlan {
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int pp = 1;
  int v = 1;                 // chunks per stage
  std::vector<int> layers;   // blocks per virtual stage (pp x v of them; map() says whose)
  int micro_batches = 0;     // per step; 0: the partition only (no actions, no slots)
  Schedule actions;          // one list per stage (build_schedule)
  // slots[stage][chunk]: activation sets the chunk needs to run its
  // stage's list (slots_needed): the in-flight bound the executor allocates.
  std::vector<std::vector<int>> slots;
  // With several chunks per stage (shares_slots()), the chunks share their
  // slots: shared_slots[stage] sets, the most (micro-batch, chunk) pairs the
  // stage holds at once (shared_slots_needed), each usable by any chunk.
  std::vector<int> shared_slots;
  bool shares_slots() const { return v > 1; }

  int virtual_stages() const { return pp * v; }
  // Which virtual stage each (stage, chunk) is: interleaved, or ZB-V's V.
  ChunkMap map() const { return chunk_map(schedule, pp, v); }
  // The first block of virtual stage vs.
  int first_layer(int vs) const;
};

// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-v"; UserError naming parallel.schedule otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);

// schedule: its name; v: chunks per stage; pp_layers: blocks per virtual
// stage as the user gave them (empty: balanced by cost, every block costing
// 1 and the last chunk also head_blocks, the final norm, LM head and loss
// in units of one block); micro_batches: per step (0: no action lists).
// UserError when the blocks cannot fill the chunks, pp_layers is
// malformed, or the schedule refuses the micro-batch count.
// ratios: the pass times a schedule built by list scheduling (ZB-V) is
// placed with.
PipelinePlan plan_pipeline(const std::string& schedule, int v, const std::vector<int>& pp_layers, int n_layer,
                           int pp, double head_blocks, int micro_batches = 0, const PassRatios& ratios = {});

// How many activation sets each of the v chunks needs to run one stage's
// `actions`: a (micro-batch, chunk) holds one from its first action (a
// receive or its forward) to its last (the send of its gradient, or its
// backward — its weight pass when split — where that comes later). At
// least 1 each.
std::vector<int> slots_needed(const StageSchedule& actions, int v);
// The same over all chunks together: the most (micro-batch, chunk) pairs
// holding a set at once (a stage whose chunks share their sets).
int shared_slots_needed(const StageSchedule& actions);
// Per (micro-batch, chunk): the index of its last action in `actions`.
std::map<std::pair<int, int>, size_t> last_actions(const StageSchedule& actions);

}  // namespace loom::pp
