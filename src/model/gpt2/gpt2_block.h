// One GPT-2 block, forward and backward, written out by hand (Megatron-LM's
// tensor-parallel scheme: column-parallel QKV and c_fc, row-parallel
// projections, optional sequence parallelism; the layers in parallel/tp/):
//   res2 = res + attn_proj(attention(qkv(ln1(res))))
//   res3 = res2 + fc_proj(gelu(fc(ln2(res2))))
#pragma once

#include "model/block_context.h"
#include "model/gpt2/gpt2_layout.h"

namespace loom::gpt2 {

// What a block keeps for backward. A (compute type): the products' inputs and
// what attention and GELU keep; fp32: the norm statistics and the residual
// stream.
struct BlockActs {
  void *ln1, *qkv, *atty, *att, *ln2, *fch, *fch_gelu;  // A
  float *ln1_mean, *ln1_rstd, *res2, *ln2_mean, *ln2_rstd, *res3;
};

// Adds one block's activations to the plan (a = bytes of a compute element;
// tiled: the attention core keeps row log-sum-exps, not probabilities).
void plan_block(ActivationPlan& plan, BlockActs& acts, const ModelConfig& cfg, const TensorParallel& tp, int B,
                int T, size_t a, bool tiled);
// Adds the work space the blocks' backward needs to `work`'s plan.
void plan_block_work(ActivationPlan& plan, BlockWork& work, const ModelConfig& cfg, const TensorParallel& tp, int B,
                     int T, size_t a, bool tiled);

// out = acts.res3 (fp32 [R, C]) from in (fp32 [R, C]).
template <class A>
void block_forward(const BlockContext& ctx, const BlockTensors& t, BlockActs& acts, const float* in);
// dres[R, C] (the gradient of the block's output) becomes the gradient of
// its input `in`; weight gradients are added and reported ready. split
// (zero-bubble schedules): the four products' weight gradients are left
// for block_backward_weight, their output gradients kept in acts (res3,
// fch, res2, qkv: forward's values backward no longer reads); the norms'
// weight gradients are still added here.
template <class A>
void block_backward(const BlockContext& ctx, const BlockTensors& t, BlockActs& acts, const float* in, float* dres,
                    bool split = false);
// After block_backward(split): the products' weight and bias gradients,
// added and reported ready; bitwise what the combined backward adds.
template <class A>
void block_backward_weight(const BlockContext& ctx, const BlockTensors& t, const BlockActs& acts);

}  // namespace loom::gpt2
