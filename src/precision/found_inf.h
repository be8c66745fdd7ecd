// Agreeing on overflow across ranks.
//
// Each rank sees only its own gradients (its tensor-parallel slice, its
// pipeline stage, its ZeRO shard), but a step must be skipped everywhere or
// nowhere, or the replicas drift apart. The flag travels as a float MAX
// all-reduce (0 = clean, 1 = inf/NaN seen), so any rank's overflow wins.
#pragma once

#include "comm/communicator.h"

namespace loom {

// Collective over `comm` (pass the world group, ParallelContext::world(),
// so every rank of every axis takes part): true on every rank if any rank
// passed true. Blocking.
bool any_rank_found_inf(Communicator& comm, bool local_found_inf);

}  // namespace loom
