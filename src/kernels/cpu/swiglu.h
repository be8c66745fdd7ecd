// SwiGLU, LLaMA's MLP activation, on the fused gate/up product:
// gate_up[N,2F] holds per row the gate's F features, then the up's F;
// out[N,F] = silu(gate) * up with silu(x) = x / (1 + exp(-x)), as PyTorch's
// F.silu(gate) * up.
#pragma once

#include "core/dtype.h"

namespace loom::cpu {

// out[N,F] = silu(gate) * up
void swiglu_forward(float* out, const float* gate_up, int N, int F);
// 16-bit storage, fp32 math: widen gate_up, run the fp32 formula, round the
// result once. Bit for bit the fp32 kernel on the widened input, rounded.
void swiglu_forward(bf16* out, const bf16* gate_up, int N, int F);
void swiglu_forward(f16* out, const f16* gate_up, int N, int F);

// dgate_up[N,2F] (overwrites) from dout[N,F] (fp32): with s = sigmoid(gate),
// dgate = (dout * up) * s * (1 + gate * (1 - s)), dup = dout * silu(gate).
// dgate_up must not alias dout. The 16-bit versions round dgate_up once.
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int N, int F);
void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const float* dout, int N, int F);
void swiglu_backward(f16* dgate_up, const f16* gate_up, const float* dout, int N, int F);

}  // namespace loom::cpu
