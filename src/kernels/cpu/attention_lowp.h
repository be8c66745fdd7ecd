// Causal self-attention, multi-head or grouped-query, with 16-bit storage
// (bf16 or fp16) and fp32 math: the mixed-precision counterpart of
// attention.h, same layout.
//
// qkv[B,T,(NH + 2 NKV) x hs], hs = C / NH: per row the NH query heads, then
// NKV key heads, then NKV value heads; query head h reads kv head
// h / (NH / NKV). NKV == NH (or NKV = 0, the default) is GPT-2's qkv[B,T,3C].
// Scores are scaled by 1/sqrt(hs); position t attends to positions <= t
// (packed rows: from doc[t] on, as in attention.h; backward needs no doc).
//
// Numerics: scores S = scale * Q K^T and the softmax are fp32 (products of
// the 16-bit q, k summed in fp32); the probabilities P are stored rounded to
// the 16-bit type, and O = P V is computed from that stored P, then rounded
// once. The backward pass uses the stored P too. With native bf16 products
// (kernels/cpu/isa.h) its fp32 inputs (dout, dS) are rounded to bf16 for the
// products; otherwise (fp16 always, bf16 on CPUs without avx512_bf16) the
// products run in fp32 on operands widened one head at a time. A kv head's
// gradient is summed over its query heads in fp32, in head order, then
// rounded once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace loom::cpu {

// fp32 work space, in floats, that the calls below need: one slice per
// OpenMP thread, for omp_get_max_threads() threads as of this call (or
// `threads` when > 0: what a planner sizes for a run's thread count). The
// kernels index it by omp_get_thread_num(), so do not raise the thread count
// afterwards without sizing the work space again. The same for any NKV.
size_t attention_lowp_work_floats(int T, int C, int NH, int NKV = 0, int threads = 0);

// out[B,T,C]: heads concatenated; att[B,NH,T,T]: softmax probabilities,
// rounded (exact zeros above the diagonal), saved for the backward pass.
void attention_forward(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH,
                       int NKV = 0, const int32_t* doc = nullptr);
void attention_forward(f16* out, f16* att, const f16* qkv, float* work, int B, int T, int C, int NH,
                       int NKV = 0, const int32_t* doc = nullptr);

// dqkv[B,T,(NH + 2 NKV) x hs] = gradient (overwrites), from dout[B,T,C]
// (fp32) and the forward's qkv and att. scratch[B,NH,T,T] is fp32 work
// space, as in the fp32 kernel.
void attention_backward(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv, const bf16* att,
                        int B, int T, int C, int NH, int NKV = 0);
void attention_backward(f16* dqkv, float* scratch, float* work, const float* dout, const f16* qkv, const f16* att,
                        int B, int T, int C, int NH, int NKV = 0);

// The two paths the calls above choose between, for tests and benchmarks.
// native: bf16 only, needs native_bf16_products() (UserError otherwise).
void attention_forward_native(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH,
                       int NKV = 0, const int32_t* doc = nullptr);
void attention_backward_native(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv,
                               const bf16* att, int B, int T, int C, int NH, int NKV = 0);
// widened: any CPU, H = bf16 or f16.
template <class H>
void attention_forward_widened(H* out, H* att, const H* qkv, float* work, int B, int T, int C, int NH,
                       int NKV = 0, const int32_t* doc = nullptr);
template <class H>
void attention_backward_widened(H* dqkv, float* scratch, float* work, const float* dout, const H* qkv, const H* att,
                                int B, int T, int C, int NH, int NKV = 0);

}  // namespace loom::cpu
