// `loom bench checkpoint`: the stall of a synchronous save against an
// asynchronous one (bench_checkpoint_stall.cpp).
#pragma once

#include <string>

#include "model/config.h"

namespace loom::cli {

// A planner preset ("gpt2-124m") or a run config file (NAME.toml): its model.
// Throws UserError naming the known presets, or the file.
ModelConfig stall_bench_model(const std::string& name);
// model_name: as stall_bench_model takes it; writes under dir/stall.
void bench_checkpoint_stall(const std::string& model_name, const std::string& dir, int repeat);

}  // namespace loom::cli
