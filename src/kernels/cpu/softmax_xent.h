// Fused softmax + cross-entropy over a vocabulary, in fp32.
//
// A target < 0 marks a position to ignore: its loss is 0 and its logits'
// gradient is 0.
#pragma once
#include <cstdint>

namespace loom::cpu {

// losses[N] = -log softmax(logits[n, :])[targets[n]]   (logits[N,V], unchanged)
void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int N, int V);

// Forward and backward in one pass over each row, in place:
// losses[N] as above; logits[N,V] is overwritten by
//   dloss * (softmax(logits[n,:]) - onehot(targets[n]))
// i.e. the gradient of dloss * sum_n losses[n]. For a mean loss pass
// dloss = 1 / (number of counted targets).
void softmax_xent_fused(float* losses, float* logits, const int32_t* targets, float dloss, int N, int V);

}  // namespace loom::cpu
