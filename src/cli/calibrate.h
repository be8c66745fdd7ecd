// This machine measured for the planner's shape model (what `loom bench
// calibrate` writes): the fp32 peak on `threads` threads, the engine's fp32
// products on three shapes (the GEMM ceiling, short-K and skinny-M), its
// bf16 and fp16 product rates, the tiled attention kernel and memcpy
// bandwidth; with_step also a loom training step on the default model and
// the process overhead beside it (a fresh process's: not inside a run).
// Prints each figure as it goes.
#pragma once

#include "planner/cluster.h"

namespace loom::cli {

planner::ClusterSpec measure_this_machine(int threads, bool quick, bool with_step);

}  // namespace loom::cli
