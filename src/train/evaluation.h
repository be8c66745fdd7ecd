// Validation: the mean loss over every valid target of train.eval_batches
// batches of the validation split, as training's loss is normalised.
#pragma once

#include "data/token_source.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"
#include "train/run_shape.h"

namespace loom {

// Collective over the dp group; rows are read shape.micro at a time (the
// model holds activations for that many).
float evaluate(Replica& replica, const TokenSource& data, int batches, const RunShape& shape,
               const ParallelContext& ctx);

}  // namespace loom
