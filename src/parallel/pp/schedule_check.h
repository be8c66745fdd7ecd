// A pure checker for pipeline schedules: the properties an executor relies on.
//
// check_schedule returns human-readable problems; empty means the schedule is
// valid for pp stages, m micro-batches and v chunks per stage (placed on the
// virtual stages as the ChunkMap says):
//   - every (micro-batch, chunk) has exactly one Forward and one Backward on
//     each stage, the Backward after the Forward; or, split (zero-bubble
//     schedules), one BackwardInput after the Forward and one BackwardWeight
//     after that (the receive and send of the gradient go around the
//     BackwardInput);
//   - each Forward / Backward has its receive before it and its send after it
//     exactly where the virtual stage needs one (and nowhere else);
//   - ReduceGrads then OptimizerStep end every stage's list;
//   - every send has a matching receive on the neighbouring virtual stage,
//     in the same order per channel (channel = kind x sending stage x
//     receiving stage, like one MPI tag between two ranks);
//   - no deadlock, simulating blocking receives and eager sends (a send never
//     blocks: it is posted non-blocking and its buffer is kept until done);
//   - on each stage, micro-batches whose Forward ran and Backward (or
//     BackwardWeight) has not never exceed the bound (one int for every stage, or one per stage).
#pragma once

#include <string>
#include <vector>

#include "parallel/pp/schedule.h"

namespace loom::pp {

std::vector<std::string> check_schedule(const Schedule& schedule, int pp, int m, int v, int max_in_flight);
std::vector<std::string> check_schedule(const Schedule& schedule, int pp, int m, int v,
                                        const std::vector<int>& max_in_flight_per_stage);
// Any chunk map (the two above: interleaved, chunk c of stage s is c pp + s).
std::vector<std::string> check_schedule(const Schedule& schedule, const ChunkMap& map, int m,
                                        const std::vector<int>& max_in_flight_per_stage);

}  // namespace loom::pp
