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
