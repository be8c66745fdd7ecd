// Fused softmax + cross-entropy over a vocabulary, in fp32.
//
// A target < 0 marks a position to ignore: its loss is 0 and its logits'
// gradient is 0.
//
// Mixed precision: the logits may be bf16 or fp16 (the head's product
// rounded once); every kernel below then widens them to fp32 as it reads,
// computes exactly as for fp32 logits, and writes the gradient back rounded
// once to the logits' type (the head's backward products read it in that
// type), so the logits cost 2 bytes per element instead of 4.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace loom::cpu {

// losses[N] = -log softmax(logits[n, :])[targets[n]]   (logits[N,V], unchanged)
void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int N, int V);

// Forward and backward in one pass over each row, in place:
// losses[N] as above; logits[N,V] is overwritten by
//   dloss * (softmax(logits[n,:]) - onehot(targets[n]))
// i.e. the gradient of dloss * sum_n losses[n]. For a mean loss pass
// dloss = 1 / (number of counted targets).
void softmax_xent_fused(float* losses, float* logits, const int32_t* targets, float dloss, int N, int V);

// The same on 16-bit logits.
void softmax_xent_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V);
void softmax_xent_forward(float* losses, const f16* logits, const int32_t* targets, int N, int V);
void softmax_xent_fused(float* losses, bf16* logits, const int32_t* targets, float dloss, int N, int V);
void softmax_xent_fused(float* losses, f16* logits, const int32_t* targets, float dloss, int N, int V);

}  // namespace loom::cpu

namespace loom::cpu {

// Vocabulary-parallel cross-entropy (tensor parallelism): each rank holds
// logits[N, Vl], the columns [vocab_begin, vocab_begin + Vl) of the full
// logits, of which the first `valid` are real (the rest is padding, never
// counted). The full row is never gathered: the caller reduces two small
// vectors over the ranks between the three passes.
//   1. xent_partial_max   -> row_max[N]          (then MAX over ranks)
//   2. xent_partial_sums  -> sums[N,2]: sum of exp(x - max) over this rank's
//                            columns, and the target's logit if this rank
//                            holds it (else 0)     (then SUM over ranks)
//   3. xent_finish        -> losses[N], and logits overwritten in place by
//      dloss * (softmax - onehot(target)), padding columns 0.
void xent_partial_max(float* row_max, const float* logits, int N, int Vl, int valid);
void xent_partial_sums(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                       int64_t vocab_begin, int N, int Vl, int valid);
void xent_finish(float* losses, float* logits, const float* row_max, const float* sums, const int32_t* targets,
                 int64_t vocab_begin, float dloss, int N, int Vl, int valid);

// The same on 16-bit logits (L = bf16 or f16).
template <class L>
void xent_partial_max(float* row_max, const L* logits, int N, int Vl, int valid);
template <class L>
void xent_partial_sums(float* sums, const L* logits, const float* row_max, const int32_t* targets,
                       int64_t vocab_begin, int N, int Vl, int valid);
template <class L>
void xent_finish(float* losses, L* logits, const float* row_max, const float* sums, const int32_t* targets,
                 int64_t vocab_begin, float dloss, int N, int Vl, int valid);

}  // namespace loom::cpu
