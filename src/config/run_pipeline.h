// The run's pipeline: its plan (parallel/pp/pipeline_plan.h holds the
// plan's type and how it is made from plain values) from its config, and
// the model chunks each stage holds: what the trainer builds and what the
// planner predicts from, made in one place.
#pragma once

#include <vector>

#include "config/run_config.h"
#include "model/shard.h"
#include "parallel/pp/pipeline_plan.h"

namespace loom {

using pp::PipelinePlan;

// What the last chunk's final norm, LM head and loss cost against one block
// (per token, forward: the head's 2 C V against a block's 24 C^2 + 4 T C):
// the balanced partition gives that chunk fewer blocks.
double head_cost_in_blocks(const ModelConfig& model);

// One block's forward, input-gradient and weight-gradient passes in FLOPs
// per token, as ratios: what ZB-V's list scheduling places passes with
// (forward 2 W + 4 T C, input gradient 2 W + 8 T C, weight gradient 2 W for
// a block's W weight-matrix elements; attention's products are all in the
// first two).
pp::PassRatios pass_ratios(const ModelConfig& model);

// parallel.schedule, parallel.virtual_stages and parallel.pp_layers (or the
// partition balanced by cost) on `stages` pipeline stages; with
// micro_batches > 0 also every stage's action list and slots. UserError
// naming the field when the model's blocks cannot fill the chunks.
PipelinePlan plan_pipeline(const RunConfig& cfg, int stages, int micro_batches = 0);

// The model chunks of pipeline stage `stage` on tensor-parallel rank
// tp_rank of tp_size: chunk c holds virtual stage plan.map().virtual_stage(stage, c)
// (the first virtual stage holds the embedding, the last the head), and
// experts ep_rank's share of ep.
std::vector<ModelShard> chunk_shards(const RunConfig& cfg, const PipelinePlan& plan, int stage, int tp_rank,
                                     int tp_size, int ep_rank = 0, int ep_size = 1);

}  // namespace loom
