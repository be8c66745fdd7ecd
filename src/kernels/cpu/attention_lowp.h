// Causal multi-head self-attention with 16-bit storage (bf16 or fp16) and
// fp32 math: the mixed-precision counterpart of attention.h, same layout.
//
// qkv[B,T,3C] holds q, k, v side by side, each [NH, hs] with hs = C / NH;
// scores are scaled by 1/sqrt(hs); position t attends to positions <= t.
//
// Numerics: scores S = scale * Q K^T and the softmax are fp32 (products of
// the 16-bit q, k summed in fp32); the probabilities P are stored rounded to
// the 16-bit type, and O = P V is computed from that stored P, then rounded
// once. The backward pass uses the stored P too. With native bf16 products
// (kernels/cpu/isa.h) its fp32 inputs (dout, dS) are rounded to bf16 for the
// products; otherwise (fp16 always, bf16 on CPUs without avx512_bf16) the
// products run in fp32 on operands widened one head at a time.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace loom::cpu {

// fp32 work space, in floats, that the calls below need: one slice per
// OpenMP thread, for omp_get_max_threads() threads as of this call. The
// kernels index it by omp_get_thread_num(), so do not raise the thread count
// afterwards without sizing the work space again.
size_t attention_lowp_work_floats(int T, int C, int NH);

// out[B,T,C]: heads concatenated; att[B,NH,T,T]: softmax probabilities,
// rounded (exact zeros above the diagonal), saved for the backward pass.
void attention_forward(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH);
void attention_forward(f16* out, f16* att, const f16* qkv, float* work, int B, int T, int C, int NH);

// dqkv[B,T,3C] = gradient (overwrites), from dout[B,T,C] (fp32) and the
// forward's qkv and att. scratch[B,NH,T,T] is fp32 work space, as in the
// fp32 kernel.
void attention_backward(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv, const bf16* att,
                        int B, int T, int C, int NH);
void attention_backward(f16* dqkv, float* scratch, float* work, const float* dout, const f16* qkv, const f16* att,
                        int B, int T, int C, int NH);

// The two paths the calls above choose between, for tests and benchmarks.
// native: bf16 only, needs native_bf16_products() (UserError otherwise).
void attention_forward_native(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH);
void attention_backward_native(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv,
                               const bf16* att, int B, int T, int C, int NH);
// widened: any CPU, H = bf16 or f16.
template <class H>
void attention_forward_widened(H* out, H* att, const H* qkv, float* work, int B, int T, int C, int NH);
template <class H>
void attention_backward_widened(H* dqkv, float* scratch, float* work, const float* dout, const H* qkv, const H* att,
                                int B, int T, int C, int NH);

}  // namespace loom::cpu
