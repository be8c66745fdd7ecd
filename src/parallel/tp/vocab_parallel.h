// Vocabulary-parallel embedding and cross-entropy (Megatron-LM): the token
// table wte[Vp, C] (Vp = vocabulary padded to a multiple of 64 x tp) is split
// by rows; rank r holds rows [vocab_begin, vocab_begin + vocab_rows), of which
// `valid` are real tokens. The tied LM head gives each rank its slice of the
// logits, and the loss is computed from two reductions of per-row vectors
// (max, then sum of exp and target logit), never gathering the full logits.
#pragma once

#include <cstdint>

#include "kernels/backend_fwd.h"
#include "parallel/tp/tensor_parallel.h"

namespace loom::tp {

struct VocabSlice {
  int64_t begin = 0;  // first global row of this rank
  int rows = 0;       // rows held (padding included): the local logits' width
  int valid = 0;      // of those, real vocabulary entries
};

// out[local_rows, C] = wte[tokens] + wpe[position] for this rank's rows of
// the N = B x T token rows. work[N, C]: the masked lookups before their
// reduction (unused on one rank). wpe == nullptr: no position table (LLaMA's
// positions are rotary, inside attention).
void embedding_forward(Backend& ops, const TensorParallel& tp, float* out, float* work, const int32_t* tokens,
                       const float* wte_rows, const VocabSlice& vocab, const float* wpe, int N, int T, int C,
                       const int32_t* positions = nullptr);

// Gradients of the lookup from dout[local_rows, C]: dwpe (partial over the
// sequence-parallel ranks: each adds its own rows) and this rank's rows of
// dwte. work[N, C] receives the gathered gradient with sequence parallelism.
// dwpe == nullptr: no position table.
void embedding_backward(Backend& ops, const TensorParallel& tp, float* dwte_rows, float* dwpe, const float* dout, float* work,
                        const int32_t* tokens, const VocabSlice& vocab, int N, int T, int C,
                        const int32_t* positions = nullptr);

// Cross-entropy of logits[N, vocab.rows] (this rank's columns) against
// targets[N] (< 0: ignored). losses[N] (the same on every rank).
// With dloss != 0 (or `backward`), logits become dloss x (softmax - onehot),
// padding columns 0. scratch[3N] is work space. L: float, or bf16 / fp16
// logits (read widened, the gradient written back rounded; fp32 math).
template <class L>
void cross_entropy(Backend& ops, const TensorParallel& tp, float* losses, L* logits, float* scratch, const int32_t* targets,
                   const VocabSlice& vocab, int N, bool backward, float dloss);

}  // namespace loom::tp
