// Sampling tokens from a whole model (one process, batch 1): what
// `loom generate` streams and what `loom train` prints at the end of a run.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/stage_module.h"

namespace loom {

struct SamplingOptions {
  int max_tokens = 100;
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 40;            // 0 = every token
  uint64_t seed = 1;
  int eos = -1;              // stop at this token (not included); -1 = never
};

// One token from logits[V]: the top_k most likely, softmax at `temperature`,
// chosen by u in [0, 1).
int32_t sample_token(const float* logits, int V, float temperature, int top_k, double u);

// Up to opt.max_tokens tokens continuing `prompt` (the last seq_len tokens
// are the context). on_token, if set, sees the tokens generated so far after
// each one. The model's batch must be 1 and its sequence length seq_len.
std::vector<int32_t> sample_tokens(StageModule& model, const std::vector<int32_t>& prompt, const SamplingOptions& opt,
                                   const std::function<void(const std::vector<int32_t>&)>& on_token = {});

}  // namespace loom
