#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace loom {

namespace {

// Logits of the token after `context` (at most seq_len tokens), from a
// forward pass over the context padded to a power of two (fewer shapes).
const float* next_token_logits(StageModule& model, const std::vector<int32_t>& context) {
  const int n = int(context.size());
  int T = 1;
  while (T < n) T *= 2;
  T = std::min(T, model.config().seq_len);
  std::vector<int32_t> tokens(context), no_targets(size_t(T), -1);
  tokens.resize(size_t(T), 0);
  model.forward(tokens.data(), no_targets.data(), 1, T);
  return model.logits() + size_t(n - 1) * model.config().vocab_size;
}

}  // namespace

int32_t sample_token(const float* logits, int V, float temperature, int top_k, double u) {
  if (temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  int k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(k));
  double max = logits[ids[0]], sum = 0;
  for (int i = 0; i < k; i++) sum += p[size_t(i)] = std::exp((double(logits[ids[size_t(i)]]) - max) / temperature);
  double target = u * sum;
  for (int i = 0; i < k; i++)
    if ((target -= p[size_t(i)]) <= 0) return ids[size_t(i)];
  return ids[size_t(k - 1)];
}

std::vector<int32_t> sample_tokens(StageModule& model, const std::vector<int32_t>& prompt, const SamplingOptions& opt,
                                   const std::function<void(const std::vector<int32_t>&)>& on_token) {
  const int V = model.config().vocab_size;
  std::vector<int32_t> tokens(prompt), generated;
  for (int n = 0; n < opt.max_tokens; n++) {
    const size_t keep = std::min(tokens.size(), size_t(model.config().seq_len));
    std::vector<int32_t> context(tokens.end() - long(keep), tokens.end());
    const float* logits = next_token_logits(model, context);
    const int32_t next = sample_token(logits, V, opt.temperature, opt.top_k, rng_uniform(opt.seed, 0x67656e, uint64_t(n)));
    if (next == opt.eos) break;
    tokens.push_back(next);
    generated.push_back(next);
    if (on_token) on_token(generated);
  }
  return generated;
}

}  // namespace loom
