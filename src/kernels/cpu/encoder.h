// Token + learned position embedding.
#pragma once
#include <cstdint>

namespace loom::cpu {

// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]
// tokens[B,T] in [0, V); wte[V,C]; wpe[maxT,C] (only the first T rows are read)
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);

// dwte[V,C] += scatter of dout by token; dwpe[maxT,C] += sum over batch.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C);

}  // namespace loom::cpu

namespace loom::cpu {

// The same lookup in parts, for a table split by vocabulary rows (tensor
// parallelism) and a residual stream split by rows (sequence parallelism).
// wte_rows[vocab_rows, C] holds the global rows [vocab_begin, vocab_begin +
// vocab_rows); a token outside them gives a zero row (another rank adds it).
// out[N,C] = wte[tokens[n]] or 0; tokens[N]
void token_embedding_forward(float* out, const int32_t* tokens, const float* wte_rows, int64_t vocab_begin,
                             int64_t vocab_rows, int N, int C);
// dwte_rows += dout[n] for the tokens inside this rank's rows.
void token_embedding_backward(float* dwte_rows, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                              int64_t vocab_rows, int N, int C);
// Rows n of out[N,C] are the flat token rows first_row + n of a [B,T] batch:
// out[n] += wpe[pos(r)], r = first_row + n; pos(r) = positions[r] (per row
// of the whole [B*T] batch: context parallelism's global positions, packed
// rows' positions in their documents), or r % T when null.
void position_embedding_forward(float* out, const float* wpe, int64_t first_row, int N, int T, int C,
                                const int32_t* positions = nullptr);
// dwpe[pos(r)] += dout[n]
void position_embedding_backward(float* dwpe, const float* dout, int64_t first_row, int N, int T, int C,
                                 const int32_t* positions = nullptr);

}  // namespace loom::cpu
