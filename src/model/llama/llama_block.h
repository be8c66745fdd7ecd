// One LLaMA block, forward and backward, written out by hand (the same
// tensor-parallel scheme as GPT-2's: column-parallel fused q/k/v and fused
// gate/up, row-parallel o_proj and down_proj, optional sequence parallelism;
// no biases but the optional q/k/v bias of Qwen2):
//   res2 = res + o_proj(attention(rope(qkv(rmsnorm(res)))))   (grouped-query)
//   res3 = res2 + down(silu(gate(x)) * up(x)),  x = rmsnorm(res2)
#pragma once

#include "model/block_context.h"
#include "model/moe/moe_block.h"
#include "model/llama/llama_layout.h"

namespace loom::llama {

// What a block keeps for backward: A (compute type) for the products' inputs
// and what attention and SwiGLU keep (qkv after the rotation); fp32 for the
// norm statistics and the residual stream.
struct BlockActs {
  void *attn_in, *qkv, *atty, *att, *mlp_in, *gate_up, *hidden;  // A
  float *attn_rstd, *res2, *mlp_rstd, *res3;
  moe::Acts moe;  // the mixtral family's MoE blocks
};

// Rotary tables cos/sin [positions, hd/2] (cpu::rope_table), read at
// BlockContext::pos (n % T where null).
struct RopeTables {
  const float* cos;
  const float* sin;
};

// ep: the ranks the experts are spread over (model/moe/moe_block.h).
void plan_block(ActivationPlan& plan, BlockActs& acts, const ModelConfig& cfg, const TensorParallel& tp, int B,
                int T, size_t a, bool tiled, int ep = 1);
void plan_block_work(ActivationPlan& plan, BlockWork& work, const ModelConfig& cfg, const TensorParallel& tp, int B,
                     int T, size_t a, bool tiled, int ep = 1);

template <class A>
void block_forward(const BlockContext& ctx, const RopeTables& rope, const BlockTensors& t, BlockActs& acts,
                   const float* in);
// dres[R, C] (the gradient of the block's output) becomes the gradient of
// its input `in`; weight gradients are added and reported ready. split
// (zero-bubble schedules): the four products' weight gradients are left for
// block_backward_weight, their output gradients kept in acts (res3,
// gate_up, res2, qkv: values backward no longer reads); the norms' weight
// gradients are still added here.
template <class A>
void block_backward(const BlockContext& ctx, const RopeTables& rope, const BlockTensors& t, BlockActs& acts,
                    const float* in, float* dres, bool split = false);
// After block_backward(split): the products' weight gradients, added and
// reported ready; bitwise what the combined backward adds.
template <class A>
void block_backward_weight(const BlockContext& ctx, const BlockTensors& t, const BlockActs& acts);

}  // namespace loom::llama
