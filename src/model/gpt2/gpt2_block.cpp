#include "model/gpt2/gpt2_block.h"

#include <algorithm>

#include "model/lora/lora_block.h"
#include "parallel/tp/linear.h"

namespace loom::gpt2 {
namespace {

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace

void plan_block(ActivationPlan& plan, BlockActs& l, const ModelConfig& cfg, const TensorParallel& tp, int B, int T,
                size_t a, bool tiled) {
  const size_t N = size_t(B) * T, R = size_t(tp.local_rows(int64_t(N))), C = cfg.d_model, t = size_t(tp.size());
  const size_t Cl = C / t, NHl = size_t(cfg.n_head) / t, Fl = size_t(cfg.ffn()) / t;
  plan.want(&l.ln1, R * C, a), plan.want(&l.ln1_mean, R), plan.want(&l.ln1_rstd, R);
  plan.want(&l.qkv, N * 3 * Cl, a), plan.want(&l.atty, N * Cl, a);
  plan.want(&l.att, Attention::saved_bytes(tiled, B, T, int(NHl), a), 1);
  plan.want(&l.res2, R * C);
  plan.want(&l.ln2, R * C, a), plan.want(&l.ln2_mean, R), plan.want(&l.ln2_rstd, R);
  plan.want(&l.fch, N * Fl, a), plan.want(&l.fch_gelu, N * Fl, a), plan.want(&l.res3, R * C);
}

void plan_block_work(ActivationPlan& plan, BlockWork& w, const ModelConfig& cfg, const TensorParallel& tp, int B,
                     int T, size_t a, bool tiled) {
  const size_t N = size_t(B) * T, t = size_t(tp.size()), Cl = size_t(cfg.d_model) / t;
  const size_t NHl = size_t(cfg.n_head) / t, Fl = size_t(cfg.ffn()) / t;
  plan.want(&w.dattn_out, N * Cl), plan.want(&w.dqkv, N * 3 * Cl, a);
  plan.want(&w.dmlp_out, N * Fl), plan.want(&w.datt, Attention::scratch_floats(tiled, B, T, int(NHl)));
  if (a != sizeof(float)) plan.want(&w.dmlp_in, N * Fl, a);
  const int C = cfg.d_model, F = cfg.ffn();
  if (cfg.lora.enabled()) plan.want(&w.lora, lora::block_work_floats(cfg, int(N), std::max(C, F), std::max(3 * C, F)));
  // fp32: GELU's backward runs in place (dmlp_in = dmlp_out), set by the stage.
}

template <class A>
void block_forward(const BlockContext& ctx, const BlockTensors& p, BlockActs& a, const float* res) {
  const int C = ctx.cfg.d_model, t = ctx.tp.size(), Cl = C / t, NHl = ctx.cfg.n_head / t, Fl = ctx.cfg.ffn() / t;
  const int N = ctx.N(), R = ctx.R();
  const bool sp = ctx.tp.sequence_parallel();
  CpuBackend& ops = ctx.ops;
  const ParamAccess& w = ctx.p;
  A* work = as<A>(ctx.work.gathered);  // only used with sequence parallelism
  A *ln1 = as<A>(a.ln1), *qkv = as<A>(a.qkv), *atty = as<A>(a.atty);
  A *ln2 = as<A>(a.ln2), *fch = as<A>(a.fch), *fch_gelu = as<A>(a.fch_gelu);
  // Attention: res2 = res + attn_proj(attention(qkv(ln1(res))))
  ops.layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, res, w.param(p.ln1_w), w.param(p.ln1_b), R, C);
  const A* x = ctx.tp.gather_rows(ln1, work, N, C);
  tp::column_parallel_forward(ops, qkv, x, w.weight<A>(p.qkv_w), w.param(p.qkv_b), N, C, 3 * Cl);
  lora::column_forward<A>(ctx, p.qkv_lora, qkv, 3 * Cl, 0, x, C, 3 * Cl);
  ctx.attn.forward(atty, a.att, qkv, ctx.B, ctx.T, Cl, NHl, NHl, ctx.doc);
  auto attn_proj_lora = [&](float* partial) { lora::row_forward<A>(ctx, p.attn_proj_lora, partial, atty, Cl, C); };
  const tp::PartialTerm attn_proj_term(attn_proj_lora);
  tp::row_parallel_forward(ops, ctx.tp, a.res2, sp ? ctx.work.grad_work : a.res2, atty,
                           w.weight<A>(p.attn_proj_w), w.param(p.attn_proj_b), res, N, Cl, C,
                           p.attn_proj_lora.on() ? &attn_proj_term : nullptr);
  // MLP: res3 = res2 + fc_proj(gelu(fc(ln2(res2))))
  ops.layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.param(p.ln2_w), w.param(p.ln2_b), R, C);
  x = ctx.tp.gather_rows(ln2, work, N, C);
  tp::column_parallel_forward(ops, fch, x, w.weight<A>(p.fc_w), w.param(p.fc_b), N, C, Fl);
  lora::column_forward<A>(ctx, p.fc_lora, fch, Fl, 0, x, C, Fl);
  ops.gelu_forward(fch_gelu, fch, size_t(N) * Fl);
  auto fc_proj_lora = [&](float* partial) { lora::row_forward<A>(ctx, p.fc_proj_lora, partial, fch_gelu, Fl, C); };
  const tp::PartialTerm fc_proj_term(fc_proj_lora);
  tp::row_parallel_forward(ops, ctx.tp, a.res3, sp ? ctx.work.grad_work : a.res3, fch_gelu,
                           w.weight<A>(p.fc_proj_w), w.param(p.fc_proj_b), a.res2, N, Fl, C,
                           p.fc_proj_lora.on() ? &fc_proj_term : nullptr);
}

template <class A>
void block_backward(const BlockContext& ctx, const BlockTensors& p, BlockActs& a, const float* res_in, float* dres,
                    bool split) {
  const int C = ctx.cfg.d_model, t = ctx.tp.size(), Cl = C / t, NHl = ctx.cfg.n_head / t, Fl = ctx.cfg.ffn() / t;
  const int N = ctx.N(), R = ctx.R();
  const bool sp = ctx.tp.sequence_parallel();
  CpuBackend& ops = ctx.ops;
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  float* const dnorm = k.dnorm;
  float* const partial = sp ? k.grad_work : k.dnorm;  // input-gradient partial sums before their reduction
  A* const gathered = as<A>(k.gathered);
  A* const dqkv = as<A>(k.dqkv);
  A* const dfch = as<A>(k.dmlp_in);
  const ResidualGrad<A> dres_a(ctx, dres);
  const A *ln1 = as<A>(a.ln1), *qkv = as<A>(a.qkv), *atty = as<A>(a.atty);
  const A *ln2 = as<A>(a.ln2), *fch = as<A>(a.fch), *fch_gelu = as<A>(a.fch_gelu);
  // split: the products' weight gradients wait for block_backward_weight;
  // each product's output gradient is kept for it (stash_w) in a buffer of
  // this block that backward is done with.
  auto dweight = [&](int i) { return split ? nullptr : w.grad(i); };
  auto weight_ready = [&](int i) {
    if (!split) ctx.grad_ready(i);
  };
  // LoRA: a row-parallel product's output gradient as its backward gathered
  // it, and a norm's output on every row (a split backward gathers it here).
  auto dout_rows = [&] { return sp ? dres_a.rows() : dres_a.local(); };
  auto x_rows = [&](const A* local) { return !sp ? local : split ? ctx.tp.gather_rows(local, gathered, N, C) : gathered; };
  if (split) stash_w(a.res3, dres, size_t(R) * C);  // fc_proj's output gradient
  // MLP. Sequence parallel: ln2's rows are gathered again (not kept whole),
  // while the row-parallel backward runs.
  auto ln2_ready = split ? nullptr : ctx.tp.gather_rows_async(ln2, gathered, N, C);
  dres_a.refresh();
  tp::row_parallel_backward(ops, ctx.tp, k.dmlp_out, dweight(p.fc_proj_w), dweight(p.fc_proj_b),
                            dres_a.local(), dres_a.rows(), fch_gelu, w.weight<A>(p.fc_proj_w), N, Fl, C);
  weight_ready(p.fc_proj_w), weight_ready(p.fc_proj_b);
  lora::row_backward<A>(ctx, p.fc_proj_lora, k.dmlp_out, dout_rows(), fch_gelu, Fl, C);
  ops.gelu_backward(dfch, fch, k.dmlp_out, size_t(N) * Fl);
  auto fc_lora = [&](float* part) { lora::column_backward_input<A>(ctx, p.fc_lora, part, dfch, Fl, 0, C, Fl); };
  const tp::PartialTerm fc_term(fc_lora);
  tp::column_parallel_backward(ops, ctx.tp, dnorm, partial, dweight(p.fc_w), dweight(p.fc_b), dfch,
                               sp ? gathered : ln2, w.weight<A>(p.fc_w), N, C, Fl, ln2_ready.get(),
                               p.fc_lora.on() ? &fc_term : nullptr);
  weight_ready(p.fc_w), weight_ready(p.fc_b);
  if (p.fc_lora.on()) lora::column_backward_weights<A>(ctx, p.fc_lora, dfch, Fl, 0, x_rows(ln2), C, Fl);
  if (split) stash_w(a.fch, dfch, size_t(N) * Fl);
  ops.layernorm_backward(dres, w.grad(p.ln2_w), w.grad(p.ln2_b), dnorm, a.res2, w.param(p.ln2_w), a.ln2_mean,
                         a.ln2_rstd, R, C);
  ctx.grad_ready(p.ln2_w), ctx.grad_ready(p.ln2_b);
  if (split) stash_w(a.res2, dres, size_t(R) * C);  // attn_proj's output gradient
  // Attention.
  auto ln1_ready = split ? nullptr : ctx.tp.gather_rows_async(ln1, gathered, N, C);
  dres_a.refresh();
  tp::row_parallel_backward(ops, ctx.tp, k.dattn_out, dweight(p.attn_proj_w), dweight(p.attn_proj_b),
                            dres_a.local(), dres_a.rows(), atty, w.weight<A>(p.attn_proj_w), N, Cl, C);
  weight_ready(p.attn_proj_w), weight_ready(p.attn_proj_b);
  lora::row_backward<A>(ctx, p.attn_proj_lora, k.dattn_out, dout_rows(), atty, Cl, C);
  ctx.attn.backward(dqkv, k.datt, k.dattn_out, qkv, atty, a.att, ctx.B, ctx.T, Cl, NHl, NHl, ctx.doc);
  auto qkv_lora = [&](float* part) {
    lora::column_backward_input<A>(ctx, p.qkv_lora, part, dqkv, 3 * Cl, 0, C, 3 * Cl);
  };
  const tp::PartialTerm qkv_term(qkv_lora);
  tp::column_parallel_backward(ops, ctx.tp, dnorm, partial, dweight(p.qkv_w), dweight(p.qkv_b), dqkv,
                               sp ? gathered : ln1, w.weight<A>(p.qkv_w), N, C, 3 * Cl, ln1_ready.get(),
                               p.qkv_lora.on() ? &qkv_term : nullptr);
  weight_ready(p.qkv_w), weight_ready(p.qkv_b);
  if (p.qkv_lora.on()) lora::column_backward_weights<A>(ctx, p.qkv_lora, dqkv, 3 * Cl, 0, x_rows(ln1), C, 3 * Cl);
  if (split) stash_w(a.qkv, dqkv, size_t(N) * 3 * Cl);
  ops.layernorm_backward(dres, w.grad(p.ln1_w), w.grad(p.ln1_b), dnorm, res_in, w.param(p.ln1_w), a.ln1_mean,
                         a.ln1_rstd, R, C);
  ctx.grad_ready(p.ln1_w), ctx.grad_ready(p.ln1_b);
}

template <class A>
void block_backward_weight(const BlockContext& ctx, const BlockTensors& p, const BlockActs& a) {
  const int C = ctx.cfg.d_model, t = ctx.tp.size(), Cl = C / t, Fl = ctx.cfg.ffn() / t, N = ctx.N();
  Backend& eng = ctx.ops;
  const ParamAccess& w = ctx.p;
  A* const gathered = as<A>(ctx.work.gathered);
  // What block_backward(split) kept: the residual gradients (fp32, rounded
  // and gathered again as its row-parallel products read them) and the
  // column-parallel products' output gradients.
  auto weights = [&](int wi, int bi, const A* dout, const A* x, int in, int out) {
    tp::linear_weight_backward(eng, w.grad(wi), w.grad(bi), dout, x, N, in, out);
    ctx.grad_ready(wi), ctx.grad_ready(bi);
  };
  const ResidualGrad<A> dfc_proj(ctx, a.res3);
  dfc_proj.refresh();
  weights(p.fc_proj_w, p.fc_proj_b, ctx.tp.gather_rows(dfc_proj.local(), dfc_proj.rows(), N, C), as<A>(a.fch_gelu),
          Fl, C);
  weights(p.fc_w, p.fc_b, as<A>(a.fch), ctx.tp.gather_rows(as<A>(a.ln2), gathered, N, C), C, Fl);
  const ResidualGrad<A> dattn_proj(ctx, a.res2);
  dattn_proj.refresh();
  weights(p.attn_proj_w, p.attn_proj_b, ctx.tp.gather_rows(dattn_proj.local(), dattn_proj.rows(), N, C),
          as<A>(a.atty), Cl, C);
  weights(p.qkv_w, p.qkv_b, as<A>(a.qkv), ctx.tp.gather_rows(as<A>(a.ln1), gathered, N, C), C, 3 * Cl);
}

#define LOOM_GPT2_BLOCK(A)                                                                            \
  template void block_forward<A>(const BlockContext&, const BlockTensors&, BlockActs&, const float*); \
  template void block_backward<A>(const BlockContext&, const BlockTensors&, BlockActs&, const float*, float*, bool); \
  template void block_backward_weight<A>(const BlockContext&, const BlockTensors&, const BlockActs&);
LOOM_GPT2_BLOCK(float)
LOOM_GPT2_BLOCK(bf16)
LOOM_GPT2_BLOCK(f16)
#undef LOOM_GPT2_BLOCK

}  // namespace loom::gpt2
