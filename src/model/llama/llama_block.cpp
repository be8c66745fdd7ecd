#include "model/llama/llama_block.h"

#include <algorithm>

#include "model/lora/lora_block.h"
#include "parallel/tp/linear.h"

namespace loom::llama {
namespace {

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}

// This rank's widths: query heads, kv heads, q/k/v rows, attention output, MLP.
struct LocalShape {
  int NHl, NKVl, hd, qkv, Cl, Fl;
  LocalShape(const ModelConfig& cfg, int t)
      : NHl(cfg.n_head / t),
        NKVl(cfg.kv_heads() / t),
        hd(cfg.head_dim()),
        qkv(int(cfg.qkv_rows() / t)),
        Cl(cfg.d_model / t),
        Fl(cfg.ffn() / t) {}
  int ql() const { return NHl * hd; }    // q's columns of the local qkv output
  int kvl() const { return NKVl * hd; }  // k's (and v's)
};

moe::Tensors moe_tensors(const BlockTensors& p) {
  return {p.router, p.experts_gate_up, p.experts_down, p.shared_gate_up, p.shared_down, p.shared_gate};
}

}  // namespace

void plan_block(ActivationPlan& plan, BlockActs& l, const ModelConfig& cfg, const TensorParallel& tp, int B, int T,
                size_t a, bool tiled, int ep) {
  const LocalShape s(cfg, tp.size());
  const size_t N = size_t(B) * T, R = size_t(tp.local_rows(int64_t(N))), C = cfg.d_model;
  plan.want(&l.attn_in, R * C, a), plan.want(&l.attn_rstd, R);
  plan.want(&l.qkv, N * s.qkv, a), plan.want(&l.atty, N * s.Cl, a);
  plan.want(&l.att, Attention::saved_bytes(tiled, B, T, s.NHl, a), 1), plan.want(&l.res2, R * C);
  plan.want(&l.mlp_in, R * C, a), plan.want(&l.mlp_rstd, R);
  plan.want(&l.res3, R * C);
  // Dense MLP buffers where some block is dense; the MoE ones where some is MoE.
  if (!cfg.is_moe() || cfg.moe_every > 1) plan.want(&l.gate_up, N * 2 * s.Fl, a), plan.want(&l.hidden, N * s.Fl, a);
  if (cfg.is_moe()) moe::plan_acts(plan, l.moe, cfg, int(N), tp.size(), ep, a);
}

void plan_block_work(ActivationPlan& plan, BlockWork& w, const ModelConfig& cfg, const TensorParallel& tp, int B,
                     int T, size_t a, bool tiled, int ep) {
  const LocalShape s(cfg, tp.size());
  const size_t N = size_t(B) * T;
  plan.want(&w.dattn_out, N * s.Cl), plan.want(&w.dqkv, N * s.qkv, a);
  plan.want(&w.datt, Attention::scratch_floats(tiled, B, T, s.NHl));
  plan.want(&w.dmlp_out, N * s.Fl), plan.want(&w.dmlp_in, N * 2 * s.Fl, a);
  if (cfg.is_moe()) moe::plan_work(plan, w, cfg, int(N), tp, ep, a);
  const int C = cfg.d_model, F = cfg.ffn(), q = cfg.n_head * cfg.head_dim();
  if (cfg.lora.enabled())
    plan.want(&w.lora, lora::block_work_floats(cfg, int(N), std::max({C, F, q}), std::max({C, F, q})));
}

template <class A>
void block_forward(const BlockContext& ctx, const RopeTables& rope, const BlockTensors& p, BlockActs& a,
                   const float* res) {
  const LocalShape s(ctx.cfg, ctx.tp.size());
  const int C = ctx.cfg.d_model, N = ctx.N(), R = ctx.R();
  const float eps = float(ctx.cfg.norm_eps);
  const bool sp = ctx.tp.sequence_parallel();
  CpuBackend& ops = ctx.ops;
  const ParamAccess& w = ctx.p;
  A* work = as<A>(ctx.work.gathered);  // only used with sequence parallelism
  A *attn_in = as<A>(a.attn_in), *qkv = as<A>(a.qkv), *atty = as<A>(a.atty);
  A *mlp_in = as<A>(a.mlp_in), *gate_up = as<A>(a.gate_up), *hidden = as<A>(a.hidden);
  // Attention: res2 = res + o_proj(attention(rope(qkv(rmsnorm(res)))))
  ops.rmsnorm_forward(attn_in, a.attn_rstd, res, w.param(p.attn_norm), R, C, eps);
  const A* x = ctx.tp.gather_rows(attn_in, work, N, C);
  tp::column_parallel_forward(ops, qkv, x, w.weight<A>(p.qkv), w.param(p.qkv_bias), N, C, s.qkv);
  lora::column_forward<A>(ctx, p.q_lora, qkv, s.qkv, 0, x, C, s.ql());
  lora::column_forward<A>(ctx, p.k_lora, qkv, s.qkv, s.ql(), x, C, s.kvl());
  lora::column_forward<A>(ctx, p.v_lora, qkv, s.qkv, s.ql() + s.kvl(), x, C, s.kvl());
  ops.rope_forward(qkv, rope.cos, rope.sin, N, ctx.T, s.NHl, s.NKVl, s.hd, ctx.pos);
  ctx.attn.forward(atty, a.att, qkv, ctx.B, ctx.T, s.Cl, s.NHl, s.NKVl, ctx.doc);
  auto o_lora = [&](float* partial) { lora::row_forward<A>(ctx, p.o_lora, partial, atty, s.Cl, C); };
  const tp::PartialTerm o_term(o_lora);
  tp::row_parallel_forward(ops, ctx.tp, a.res2, sp ? ctx.work.grad_work : a.res2, atty,
                           w.weight<A>(p.o_proj), nullptr, res, N, s.Cl, C, p.o_lora.on() ? &o_term : nullptr);
  // MLP: res3 = res2 + down(silu(gate) * up), gate/up of rmsnorm(res2)
  ops.rmsnorm_forward(mlp_in, a.mlp_rstd, a.res2, w.param(p.mlp_norm), R, C, eps);
  x = ctx.tp.gather_rows(mlp_in, work, N, C);
  if (p.moe()) {
    moe::mlp_forward<A>(ctx, p.layer, moe_tensors(p), a.moe, x, a.res3, a.res2);
    return;
  }
  tp::column_parallel_forward(ops, gate_up, x, w.weight<A>(p.gate_up), nullptr, N, C, 2 * s.Fl);
  lora::column_forward<A>(ctx, p.gate_lora, gate_up, 2 * s.Fl, 0, x, C, s.Fl);
  lora::column_forward<A>(ctx, p.up_lora, gate_up, 2 * s.Fl, s.Fl, x, C, s.Fl);
  ops.swiglu_forward(hidden, gate_up, N, s.Fl);
  auto down_lora = [&](float* partial) { lora::row_forward<A>(ctx, p.down_lora, partial, hidden, s.Fl, C); };
  const tp::PartialTerm down_term(down_lora);
  tp::row_parallel_forward(ops, ctx.tp, a.res3, sp ? ctx.work.grad_work : a.res3, hidden,
                           w.weight<A>(p.down), nullptr, a.res2, N, s.Fl, C, p.down_lora.on() ? &down_term : nullptr);
}

template <class A>
void block_backward(const BlockContext& ctx, const RopeTables& rope, const BlockTensors& p, BlockActs& a,
                    const float* res_in, float* dres, bool split) {
  const LocalShape s(ctx.cfg, ctx.tp.size());
  const int C = ctx.cfg.d_model, N = ctx.N(), R = ctx.R();
  const bool sp = ctx.tp.sequence_parallel();
  CpuBackend& ops = ctx.ops;
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  float* const dnorm = k.dnorm;
  float* const partial = sp ? k.grad_work : k.dnorm;  // input-gradient partial sums before their reduction
  A* const gathered = as<A>(k.gathered);
  A* const dqkv = as<A>(k.dqkv);
  A* const dgate_up = as<A>(k.dmlp_in);
  const ResidualGrad<A> dres_a(ctx, dres);
  const A *attn_in = static_cast<const A*>(a.attn_in), *qkv = static_cast<const A*>(a.qkv);
  const A *atty = static_cast<const A*>(a.atty);
  const A *mlp_in = static_cast<const A*>(a.mlp_in), *gate_up = static_cast<const A*>(a.gate_up);
  const A* hidden = static_cast<const A*>(a.hidden);
  // split: the products' weight gradients wait for block_backward_weight;
  // each product's output gradient is kept for it in a buffer backward is done with.
  auto dweight = [&](int i) { return split ? nullptr : w.grad(i); };
  auto weight_ready = [&](int i) {
    if (!split) ctx.grad_ready(i);
  };
  // LoRA: a row-parallel product's output gradient as its backward gathered
  // it, and a norm's output on every row (a split backward gathers it here).
  auto dout_rows = [&] { return sp ? dres_a.rows() : dres_a.local(); };
  auto x_rows = [&](const A* local) { return !sp ? local : split ? ctx.tp.gather_rows(local, gathered, N, C) : gathered; };
  const bool gate_up_lora = p.gate_lora.on() || p.up_lora.on();
  const bool qkv_lora = p.q_lora.on() || p.k_lora.on() || p.v_lora.on();
  if (p.moe()) {
    // The MoE MLP, its weight gradients included whatever `split` says.
    moe::mlp_backward<A>(ctx, p.layer, moe_tensors(p), a.moe, mlp_in, dres, dnorm);
  } else {
  if (split) stash_w(a.res3, dres, size_t(R) * C);  // down's output gradient
  // MLP (sequence parallel: mlp_in's rows gathered again while the
  // row-parallel backward runs).
  auto mlp_in_ready = split ? nullptr : ctx.tp.gather_rows_async(mlp_in, gathered, N, C);
  dres_a.refresh();
  tp::row_parallel_backward(ops, ctx.tp, k.dmlp_out, dweight(p.down), nullptr, dres_a.local(),
                            dres_a.rows(), hidden, w.weight<A>(p.down), N, s.Fl, C);
  weight_ready(p.down);
  lora::row_backward<A>(ctx, p.down_lora, k.dmlp_out, dout_rows(), hidden, s.Fl, C);
  ops.swiglu_backward(dgate_up, gate_up, k.dmlp_out, N, s.Fl);
  auto gate_up_input = [&](float* part) {
    lora::column_backward_input<A>(ctx, p.gate_lora, part, dgate_up, 2 * s.Fl, 0, C, s.Fl);
    lora::column_backward_input<A>(ctx, p.up_lora, part, dgate_up, 2 * s.Fl, s.Fl, C, s.Fl);
  };
  const tp::PartialTerm gate_up_term(gate_up_input);
  tp::column_parallel_backward(ops, ctx.tp, dnorm, partial, dweight(p.gate_up), nullptr, dgate_up,
                               sp ? gathered : mlp_in, w.weight<A>(p.gate_up), N, C, 2 * s.Fl, mlp_in_ready.get(),
                               gate_up_lora ? &gate_up_term : nullptr);
  weight_ready(p.gate_up);
  if (gate_up_lora) {
    const A* x = x_rows(mlp_in);
    lora::column_backward_weights<A>(ctx, p.gate_lora, dgate_up, 2 * s.Fl, 0, x, C, s.Fl);
    lora::column_backward_weights<A>(ctx, p.up_lora, dgate_up, 2 * s.Fl, s.Fl, x, C, s.Fl);
  }
  if (split) stash_w(a.gate_up, dgate_up, size_t(N) * 2 * s.Fl);
  }
  ops.rmsnorm_backward(dres, w.grad(p.mlp_norm), dnorm, a.res2, w.param(p.mlp_norm), a.mlp_rstd, R, C);
  ctx.grad_ready(p.mlp_norm);
  if (split) stash_w(a.res2, dres, size_t(R) * C);  // o_proj's output gradient
  // Attention.
  auto attn_in_ready = split ? nullptr : ctx.tp.gather_rows_async(attn_in, gathered, N, C);
  dres_a.refresh();
  tp::row_parallel_backward(ops, ctx.tp, k.dattn_out, dweight(p.o_proj), nullptr, dres_a.local(),
                            dres_a.rows(), atty, w.weight<A>(p.o_proj), N, s.Cl, C);
  weight_ready(p.o_proj);
  lora::row_backward<A>(ctx, p.o_lora, k.dattn_out, dout_rows(), atty, s.Cl, C);
  ctx.attn.backward(dqkv, k.datt, k.dattn_out, qkv, atty, a.att, ctx.B, ctx.T, s.Cl, s.NHl, s.NKVl, ctx.doc);
  ops.rope_backward(dqkv, rope.cos, rope.sin, N, ctx.T, s.NHl, s.NKVl, s.hd, ctx.pos);
  auto qkv_input = [&](float* part) {
    lora::column_backward_input<A>(ctx, p.q_lora, part, dqkv, s.qkv, 0, C, s.ql());
    lora::column_backward_input<A>(ctx, p.k_lora, part, dqkv, s.qkv, s.ql(), C, s.kvl());
    lora::column_backward_input<A>(ctx, p.v_lora, part, dqkv, s.qkv, s.ql() + s.kvl(), C, s.kvl());
  };
  const tp::PartialTerm qkv_term(qkv_input);
  tp::column_parallel_backward(ops, ctx.tp, dnorm, partial, dweight(p.qkv), dweight(p.qkv_bias), dqkv,
                               sp ? gathered : attn_in, w.weight<A>(p.qkv), N, C, s.qkv, attn_in_ready.get(),
                               qkv_lora ? &qkv_term : nullptr);
  weight_ready(p.qkv), weight_ready(p.qkv_bias);
  if (qkv_lora) {
    const A* x = x_rows(attn_in);
    lora::column_backward_weights<A>(ctx, p.q_lora, dqkv, s.qkv, 0, x, C, s.ql());
    lora::column_backward_weights<A>(ctx, p.k_lora, dqkv, s.qkv, s.ql(), x, C, s.kvl());
    lora::column_backward_weights<A>(ctx, p.v_lora, dqkv, s.qkv, s.ql() + s.kvl(), x, C, s.kvl());
  }
  if (split) stash_w(a.qkv, dqkv, size_t(N) * s.qkv);
  ops.rmsnorm_backward(dres, w.grad(p.attn_norm), dnorm, res_in, w.param(p.attn_norm), a.attn_rstd, R, C);
  ctx.grad_ready(p.attn_norm);
}

template <class A>
void block_backward_weight(const BlockContext& ctx, const BlockTensors& p, const BlockActs& a) {
  const LocalShape s(ctx.cfg, ctx.tp.size());
  const int C = ctx.cfg.d_model, N = ctx.N();
  Backend& eng = ctx.ops;
  const ParamAccess& w = ctx.p;
  A* const gathered = as<A>(ctx.work.gathered);
  auto weights = [&](int i, const A* dout, const A* x, int in, int out, int bias = -1) {
    tp::linear_weight_backward(eng, w.grad(i), w.grad(bias), dout, x, N, in, out);
    ctx.grad_ready(i), ctx.grad_ready(bias);
  };
  if (!p.moe()) {  // an MoE block's MLP gradients came with its backward
    const ResidualGrad<A> ddown(ctx, a.res3);
    ddown.refresh();
    weights(p.down, ctx.tp.gather_rows(ddown.local(), ddown.rows(), N, C), as<A>(a.hidden), s.Fl, C);
    weights(p.gate_up, as<A>(a.gate_up), ctx.tp.gather_rows(as<A>(a.mlp_in), gathered, N, C), C, 2 * s.Fl);
  }
  const ResidualGrad<A> do_proj(ctx, a.res2);
  do_proj.refresh();
  weights(p.o_proj, ctx.tp.gather_rows(do_proj.local(), do_proj.rows(), N, C), as<A>(a.atty), s.Cl, C);
  weights(p.qkv, as<A>(a.qkv), ctx.tp.gather_rows(as<A>(a.attn_in), gathered, N, C), C, s.qkv, p.qkv_bias);
}

#define LOOM_LLAMA_BLOCK(A)                                                                                        \
  template void block_forward<A>(const BlockContext&, const RopeTables&, const BlockTensors&, BlockActs&,         \
                                 const float*);                                                                  \
  template void block_backward<A>(const BlockContext&, const RopeTables&, const BlockTensors&, BlockActs&,       \
                                  const float*, float*, bool);                                                    \
  template void block_backward_weight<A>(const BlockContext&, const BlockTensors&, const BlockActs&);
LOOM_LLAMA_BLOCK(float)
LOOM_LLAMA_BLOCK(bf16)
LOOM_LLAMA_BLOCK(f16)
#undef LOOM_LLAMA_BLOCK

}  // namespace loom::llama
