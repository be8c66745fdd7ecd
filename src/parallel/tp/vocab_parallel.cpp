#include "parallel/tp/vocab_parallel.h"

#include <cmath>

#include "kernels/backend.h"

namespace loom::tp {

void embedding_forward(Backend& ops, const TensorParallel& tp, float* out, float* work, const int32_t* tokens,
                       const float* wte_rows, const VocabSlice& vocab, const float* wpe, int N, int T, int C,
                       const int32_t* positions) {
  if (tp.size() == 1 && wpe && !positions) {  // the whole table: one fused pass
    ops.encoder_forward(out, tokens, wte_rows, wpe, N / T, T, C);
    return;
  }
  // Each rank looks up the tokens in its rows (zeros elsewhere); the sum over
  // ranks is the full lookup, exactly (one non-zero term per element).
  float* lookups = tp.sequence_parallel() ? work : out;
  ops.token_embedding_forward(lookups, tokens, wte_rows, vocab.begin, vocab.rows, N, C);
  tp.reduce_rows(lookups, out, N, C);
  if (wpe) ops.position_embedding_forward(out, wpe, tp.first_row(N), int(tp.local_rows(N)), T, C, positions);
}

void embedding_backward(Backend& ops, const TensorParallel& tp, float* dwte_rows, float* dwpe, const float* dout, float* work,
                        const int32_t* tokens, const VocabSlice& vocab, int N, int T, int C,
                        const int32_t* positions) {
  // A frozen table (nullptr) takes no gradient; the other may still.
  if (tp.size() == 1 && dwte_rows && dwpe && !positions) {
    ops.encoder_backward(dwte_rows, dwpe, dout, tokens, N / T, T, C);
    return;
  }
  if (dwpe) ops.position_embedding_backward(dwpe, dout, tp.first_row(N), int(tp.local_rows(N)), T, C, positions);
  if (!dwte_rows) return;
  const float* all_rows = tp.gather_rows(dout, work, N, C);
  ops.token_embedding_backward(dwte_rows, all_rows, tokens, vocab.begin, vocab.rows, N, C);
}

template <class L>
void cross_entropy(Backend& ops, const TensorParallel& tp, float* losses, L* logits, float* scratch, const int32_t* targets,
                   const VocabSlice& vocab, int N, bool backward, float dloss) {
  if (tp.size() == 1 && vocab.valid == vocab.rows) {
    if (backward) ops.softmax_xent_fused(losses, logits, targets, dloss, N, vocab.rows);
    else ops.softmax_xent_forward(losses, logits, targets, N, vocab.rows);
    return;
  }
  float* row_max = scratch;   // [N]
  float* sums = scratch + N;  // [N, 2]
  ops.xent_partial_max(row_max, logits, N, vocab.rows, vocab.valid);
  tp.all_reduce(row_max, size_t(N), ReduceOp::Max);
  ops.xent_partial_sums(sums, logits, row_max, targets, vocab.begin, N, vocab.rows, vocab.valid);
  tp.all_reduce(sums, size_t(2) * N, ReduceOp::Sum);
  if (backward) {
    ops.xent_finish(losses, logits, row_max, sums, targets, vocab.begin, dloss, N, vocab.rows, vocab.valid);
    return;
  }
  for (int n = 0; n < N; n++)
    losses[n] = targets[n] < 0 ? 0.f : float(std::log(double(sums[2 * n])) - double(sums[2 * n + 1]));
}

template void cross_entropy<float>(Backend&, const TensorParallel&, float*, float*, float*, const int32_t*, const VocabSlice&,
                                   int, bool, float);
template void cross_entropy<bf16>(Backend&, const TensorParallel&, float*, bf16*, float*, const int32_t*, const VocabSlice&,
                                  int, bool, float);
template void cross_entropy<f16>(Backend&, const TensorParallel&, float*, f16*, float*, const int32_t*, const VocabSlice&, int,
                                 bool, float);

}  // namespace loom::tp
