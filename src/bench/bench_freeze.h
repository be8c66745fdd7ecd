// `loom bench step --freeze PATTERNS`: what freezing tensors (train.freeze)
// saves and costs, measured on the trainer's own step (a single-process
// Replica: parameter groups, reducer, AdamW) with every tensor trained and
// then with the patterns frozen, each in its own process so its peak RSS is
// its own: tokens/s, peak RSS and the model states (parameters, gradients,
// AdamW moments) the engine holds, and the ratios of the two runs.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "precision/policy.h"

namespace loom::cli {

// In this process (loom bench step-child --replica): prints one JSON line.
// lora_rank > 0: LoRA adapters of that rank on every target of the family.
int run_replica_step_child(const ModelConfig& model, int B, int threads, int steps, ComputePrecision precision,
                           const std::vector<std::string>& freeze, int lora_rank = 0);

// The two runs of one (shape, threads, precision), printed as a table.
// child_command: the step-child command line for the shape, threads and
// steps (without --precision, --replica or --freeze).
void print_freeze_table(const std::string& shape, const ModelConfig& model, const std::string& child_command,
                        int threads, int steps, ComputePrecision precision, const std::vector<std::string>& freeze);

// `loom bench step --lora RANK`: full fine-tuning against LoRA (rank RANK,
// alpha 2 RANK, every target of the family) on the same shape, each in its
// own process: tokens/s, peak RSS, the model states and their ratios.
void print_lora_table(const std::string& shape, const ModelConfig& model, const std::string& child_command,
                      int threads, int steps, ComputePrecision precision, int rank);

}  // namespace loom::cli
