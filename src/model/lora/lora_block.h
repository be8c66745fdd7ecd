// LoRA adapters on a block's products, as the family blocks call them
// (model/gpt2/gpt2_block.cpp, model/llama/llama_block.cpp). Shapes are this
// tp rank's: a column-parallel product's adapter writes its out_l columns
// (starting at column `col` of the product's local output), a row-parallel
// product's adapter adds its partial term to the [N, C] partial sums before
// their reduction, as the base product's own partial sums are.
//
// The adapters' weight gradients are computed in the block's backward, also
// in a zero-bubble schedule's split backward: their products are rank-r
// (a few percent of the base's), and the frozen base leaves the weight pass
// nothing else to do; the weight pass stays free of parameter reads, so
// ZeRO-3 need not gather for it.
#pragma once

#include "model/block_context.h"
#include "model/lora/lora_layout.h"
#include "model/lora/lora_product.h"

namespace loom::lora {

inline Shape shape_of(const BlockContext& ctx, int in, int out) {
  return Shape{ctx.N(), in, out, ctx.cfg.lora.rank, ctx.cfg.lora.scale()};
}

// Work floats a block's adapters need (the largest of its products'), for
// plan_block_work: `widest` is the largest in + out of an adapted product.
inline size_t block_work_floats(const ModelConfig& cfg, int N, int widest_in, int widest_out) {
  if (!cfg.lora.enabled()) return 0;
  return work_floats(Shape{N, widest_in, widest_out, cfg.lora.rank, 1.f});
}

// Column-parallel product: y[N, ldy] columns [col, col + out_l) += s x A^T B^T.
template <class A>
void column_forward(const BlockContext& ctx, Adapter ad, A* y, int64_t ldy, int col, const A* x, int in, int out_l) {
  if (!ad.on()) return;
  const ParamAccess& w = ctx.p;
  forward<A, A>(ctx.ops, y + col, ldy, x, w.weight<A>(ad.a), w.weight<A>(ad.b), shape_of(ctx, in, out_l),
                ctx.work.lora);
}

// Row-parallel product: partial[N, C] += s x[N, in_l] A_l^T B^T.
template <class A>
void row_forward(const BlockContext& ctx, Adapter ad, float* partial, const A* x, int in_l, int C) {
  if (!ad.on()) return;
  const ParamAccess& w = ctx.p;
  forward<A, float>(ctx.ops, partial, C, x, w.weight<A>(ad.a), w.weight<A>(ad.b), shape_of(ctx, in_l, C),
                    ctx.work.lora);
}

// Column-parallel backward, the input gradient's part (into the partial
// sums before their reduction): dx[N, in] += s (dy B_l) A.
template <class A>
void column_backward_input(const BlockContext& ctx, Adapter ad, float* dx, const A* dy, int64_t ldy, int col, int in,
                           int out_l) {
  if (!ad.on()) return;
  const ParamAccess& w = ctx.p;
  backward<A>(ctx.ops, dx, nullptr, nullptr, dy + col, ldy, nullptr, w.weight<A>(ad.a), w.weight<A>(ad.b),
              shape_of(ctx, in, out_l), ctx.work.lora);
}

// Column-parallel backward, the factors' gradients (x: every row): dA +=
// du^T x (a partial sum over tp), dB_l += s dy^T u.
template <class A>
void column_backward_weights(const BlockContext& ctx, Adapter ad, const A* dy, int64_t ldy, int col, const A* x,
                             int in, int out_l) {
  if (!ad.on()) return;
  const ParamAccess& w = ctx.p;
  backward<A>(ctx.ops, nullptr, w.grad(ad.a), w.grad(ad.b), dy + col, ldy, x, w.weight<A>(ad.a),
              w.weight<A>(ad.b), shape_of(ctx, in, out_l), ctx.work.lora);
  ctx.grad_ready(ad.a), ctx.grad_ready(ad.b);
}

// Row-parallel backward (dy: every row, [N, C]): dx[N, in_l] += s (dy B) A_l,
// dA_l += du^T x, dB += s dy^T u_l (a partial sum over tp).
template <class A>
void row_backward(const BlockContext& ctx, Adapter ad, float* dx, const A* dy, const A* x, int in_l, int C) {
  if (!ad.on()) return;
  const ParamAccess& w = ctx.p;
  backward<A>(ctx.ops, dx, w.grad(ad.a), w.grad(ad.b), dy, C, x, w.weight<A>(ad.a), w.weight<A>(ad.b),
              shape_of(ctx, in_l, C), ctx.work.lora);
  ctx.grad_ready(ad.a), ctx.grad_ready(ad.b);
}

}  // namespace loom::lora
