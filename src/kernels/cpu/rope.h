// Rotary position embedding (LLaMA), Hugging Face's rotate-half convention:
// for head dim hd and pair i in [0, hd/2), angle = pos * theta^(-2i/hd), and
// x[i], x[i + hd/2] rotate:
//   y[i] = x[i] cos - x[i + hd/2] sin,  y[i + hd/2] = x[i + hd/2] cos + x[i] sin.
// Rows are the token rows of a [B*T] batch: row n is at position n % T, or
// pos[n] where given (context parallelism: a local row's global position;
// packed rows: its position in its document), read from that table row.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom::cpu {

// cos[T, hd/2], sin[T, hd/2] for positions 0..T-1, or row t at position
// positions[t]; computed in double, rounded to float.
void rope_table(float* cos, float* sin, int T, int hd, double theta, const int32_t* positions = nullptr);
// The same with the inverse frequencies given, inv_freq[hd/2] (rescaled
// ones: ModelConfig::rope_inverse_frequencies).
void rope_table(float* cos, float* sin, int T, int hd, const double* inv_freq, const int32_t* positions = nullptr);

// In place on the query and key heads of qkv[N, (NH + 2 NKV) x hd] (per row:
// NH query heads, then NKV key heads, then NKV value heads, which are left
// alone). The 16-bit versions widen, rotate in fp32 and round once: bit for
// bit the fp32 kernel on the widened input, rounded.
void rope_forward(float* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);
void rope_forward(bf16* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);
void rope_forward(f16* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);

// The backward pass: rotates the gradient by the opposite angle (the
// transpose), in place on dqkv of the same layout.
void rope_backward(float* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);
void rope_backward(bf16* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);
void rope_backward(f16* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                  const int32_t* pos = nullptr);

}  // namespace loom::cpu
