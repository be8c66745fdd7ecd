// Whether a model splits over tensor- and context-parallel ranks: the
// model's side of the layout rules (config/layout_rules.h holds the rest),
// asked by the stage module, the engine's layout check, the planner and
// --layout auto alike. Each returns the first reason it cannot, "" when it can.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace loom {

// tp ranks each take whole attention heads, whole key/value heads (they are
// not replicated: their gradients would need summing over the copies) and
// an equal part of the MLP's hidden features.
std::string tp_split_problem(const ModelConfig& m, int tp);
// cp ranks each take two equal chunks of every sequence (causal balance),
// which needs the tiled attention's ring.
std::string cp_split_problem(const ModelConfig& m, int cp);
// Sequence parallelism splits a micro-batch's rows x tokens_per_row over tp.
std::string sequence_parallel_problem(int64_t rows, int64_t tokens_per_row, int tp);

}  // namespace loom
