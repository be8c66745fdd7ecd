#include "model/moe/moe_block.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <numeric>

#include "comm/communicator.h"
#include "model/moe/router_state.h"

namespace loom::moe {
namespace {

// Per-sequence balancing (MoeBalance::sequence), on each sequence's own
// tokens: f_e = E / (k T) x its pairs routed to e, P_e = the mean of p_e
// (sigmoid scores: of the scores normalised to sum 1),
// loss coef x sum_e f_e P_e, weighted by the sequence's T tokens over the
// global batch's (so its gradient on each p_te is coef x loss weight x f_e).
// Under context parallelism a sequence's counts are summed over the ring's
// ranks first. seq[B, E] becomes that gradient; returns this rank's part of
// sum over sequences of T x sum_e f_e P_e.
double sequence_balance(const BlockContext& ctx, const Shape& s, const Routing& r, float* seq) {
  const int B = ctx.B, T = ctx.T, E = s.E, k = s.k;
  std::fill(seq, seq + size_t(B) * E, 0.f);
  for (int n = 0; n < s.N; n++)
    for (int j = 0; j < k; j++) seq[size_t(n / T) * E + size_t(r.expert[size_t(n) * k + j])] += 1.f;
  const int cp = ctx.cp_group ? ctx.cp_group->size() : 1;
  if (cp > 1) ctx.cp_group->all_reduce(seq, size_t(B) * E, DType::f32, ReduceOp::Sum);  // integers: exact
  const double per_pair = double(E) / (double(k) * T * cp);
  const float weight = float(ctx.cfg.moe_aux_coef) * ctx.router->loss_weight();
  double value = 0;
  std::array<double, 256> psum;  // model.n_experts <= 256
  for (int b = 0; b < B; b++) {
    std::fill(psum.begin(), psum.begin() + E, 0.0);
    for (int t = 0; t < T; t++) {
      const float* p = r.prob + (size_t(b) * T + t) * E;
      double norm = 1;  // sigmoid scores: P over the scores normalised to sum 1 (DeepSeek-V3)
      if (s.sigmoid) norm = std::accumulate(p, p + E, 0.0);
      for (int e = 0; e < E; e++) psum[size_t(e)] += p[e] / norm;
    }
    for (int e = 0; e < E; e++) {
      const double f = per_pair * seq[size_t(b) * E + e];
      value += f * psum[size_t(e)];
      seq[size_t(b) * E + e] = weight * float(f);
    }
  }
  return value;
}

// The Switch / Mixtral loss (MoeBalance::switch_), as transformers'
// load_balancing_loss_func computes it over the micro-batch's tokens of all
// L MoE layers together: E x sum_e (F_e / (L N)) (P_e / (L N)), F_e the pairs
// routed to e and P_e the summed probabilities, both over every layer;
// weighted by the micro-batch's N tokens over the global batch's. F is
// known once every layer's forward ran (before any backward), so each
// layer's gradient on p_te is coef x loss weight x E F_e / (L^2 N). grad[E]
// becomes that; returns this layer's part of N x the loss (its P_e).
double switch_balance(const BlockContext& ctx, const Shape& s, const Routing& r, float* grad) {
  const int E = s.E, N = s.N;
  ctx.router->slot_counts(ctx.slot, grad);  // F_e
  const double L = double(ctx.cfg.n_layer / ctx.cfg.moe_every);
  double value = 0;
  for (int e = 0; e < E; e++) {
    double psum = 0;
    for (int n = 0; n < N; n++) psum += r.prob[size_t(n) * E + e];
    value += double(grad[e]) * psum;
  }
  const double per_f = double(E) / (L * L * N);
  for (int e = 0; e < E; e++) grad[e] = float(ctx.cfg.moe_aux_coef * ctx.router->loss_weight() * per_f * grad[e]);
  return per_f * value;
}

}  // namespace

// The shared expert (model.moe_shared_ffn): y[N, C] += sigmoid(x . w_gate)
// x down(silu(x G^T) * (x U^T)), its width split over tp like the dense
// MLP's (y holds partial sums, reduced with the routed experts').
// Its products (into m.shared_out), with poke() between them (an exchange
// in flight moves inside MPI's calls), then shared_add.
template <class A, class Poke>
void shared_products(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, Poke&& poke) {
  const int N = ctx.N(), C = ctx.cfg.d_model, Fs = ctx.cfg.moe_shared_ffn / ctx.tp.size();
  const ParamAccess& w = ctx.p;
  Backend& eng = ctx.ops;
  A* gate_up = static_cast<A*>(m.shared_gate_up);
  A* hidden = static_cast<A*>(m.shared_hidden);
  product_out<A>(eng, gate_up, x, w.weight<A>(t.shared_gate_up), N, 2 * Fs, C);
  poke();
  ctx.ops.swiglu_forward(hidden, gate_up, N, Fs);
  product<A>(eng, m.shared_out, hidden, w.weight<A>(t.shared_down), N, C, Fs, false, true, false);
  poke();
}

template <class A>
void shared_add(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, float* y) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const float* x32 = std::is_same_v<A, float> ? reinterpret_cast<const float*>(x) : m.x32;  // the router's fp32 x
  const float* gate = w.param(t.shared_gate);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* xn = x32 + size_t(n) * C;
    double dot = 0;
    for (int c = 0; c < C; c++) dot += double(xn[c]) * gate[c];
    const float score = float(1.0 / (1.0 + std::exp(-dot)));
    m.shared_score[n] = score;
    const float* o = m.shared_out + size_t(n) * C;
    float* yn = y + size_t(n) * C;
    for (int c = 0; c < C; c++) yn[c] += score * o[c];
  }
}

template <class A>
void shared_forward(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, float* y) {
  shared_products<A>(ctx, t, m, x, [] {});
  shared_add<A>(ctx, t, m, x, y);
}

// Its backward from dy[N, C] (every row): dx[N, C] += the input's gradient
// (partial sums over tp), the weights' gradients added. The gate's gradient
// s (1 - s) dy . out is a partial sum too (out is), hence tp_partial.
// dlogit: [N] floats of scratch; poke() between the products (an exchange
// in flight).
template <class A, class Poke>
void shared_backward(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, const float* dy, float* dx,
                     float* dlogit, Poke&& poke) {
  const int N = ctx.N(), C = ctx.cfg.d_model, Fs = ctx.cfg.moe_shared_ffn / ctx.tp.size();
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  Backend& eng = ctx.ops;
  A* dout = static_cast<A*>(k.moe_shared_dy);
  A* dgate_up = static_cast<A*>(k.moe_shared_dgate_up);
  const float* x32 = std::is_same_v<A, float> ? reinterpret_cast<const float*>(x) : m.x32;
  const float* gate = w.param(t.shared_gate);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float s = m.shared_score[n];
    const float *g = dy + size_t(n) * C, *o = m.shared_out + size_t(n) * C;
    A* to = dout + size_t(n) * C;
    double dot = 0;
    for (int c = 0; c < C; c++) to[c] = from_f32<A>(s * g[c]), dot += double(g[c]) * o[c];
    dlogit[n] = float(double(s) * (1.0 - s) * dot);
    float* dxn = dx + size_t(n) * C;
    for (int c = 0; c < C; c++) dxn[c] += dlogit[n] * gate[c];
  }
  if (float* dgate = w.grad(t.shared_gate)) eng.gemm(dgate, dlogit, x32, 1, C, N, true, false, true);
  const A* hidden = static_cast<const A*>(m.shared_hidden);
  product<A>(eng, k.moe_shared_dhidden, dout, w.weight<A>(t.shared_down), N, Fs, C, false, false, false);
  poke();
  if (float* dw = w.grad(t.shared_down)) product<A>(eng, dw, dout, hidden, C, Fs, N, true, false, true);
  poke();
  eng.swiglu_backward(dgate_up, static_cast<const A*>(m.shared_gate_up), k.moe_shared_dhidden, N, Fs);
  if (float* dw = w.grad(t.shared_gate_up)) product<A>(eng, dw, dgate_up, x, 2 * Fs, C, N, true, false, true);
  poke();
  product<A>(eng, dx, dgate_up, w.weight<A>(t.shared_gate_up), N, C, 2 * Fs, false, false, true);
  ctx.grad_ready(t.shared_gate), ctx.grad_ready(t.shared_down), ctx.grad_ready(t.shared_gate_up);
}

bool experts_spread(const BlockContext& ctx) { return ctx.ep_group && ctx.ep_group->size() > 1; }

// The layer with its experts spread over ctx.ep_group: route, send the
// pairs to their owners, run the local experts, bring the outputs back,
// combine (model/moe/expert_exchange.h).
template <class A>
void forward_spread(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, const float* bias, float* y) {
  const Shape s = shape_of(ctx.cfg, ctx.N(), ctx.tp.size(), ctx.ep_group->size());
  const ParamAccess& w = ctx.p;
  const Routing r = routing(m);
  const Buffers<A> b = buffers<A>(m);
  const ExchangeLayout x_at = exchange_layout(m);
  Backend& eng = ctx.ops;
  A* send = static_cast<A*>(ctx.work.moe_send);
  route_tokens<A>(eng, send, x, w.param(t.router), bias, s, r, b);
  exchange_counts(*ctx.ep_group, s, r, x_at);
  // The tokens travel while the shared expert (which needs none of them) computes.
  PendingDispatch<A> tokens(*ctx.ep_group, send, s, r, x_at, reinterpret_cast<A*>(ctx.work.moe_stage), b.xp);
  if (t.shared_gate_up >= 0) shared_products<A>(ctx, t, m, x, [&] { tokens.poke(); });
  ExchangeTime time = tokens.finish();
  experts_forward<A>(eng, x_at.rows(s), b.xp, b.gate_up, b.hidden, ctx.work.moe_local, w.weight<A>(t.gate_up),
                     w.weight<A>(t.down), s.C, s.F);
  time.exposed += gather_back<float>(*ctx.ep_group, ctx.work.moe_local, s, r, x_at, ctx.work.moe_stage, b.yp);
  combine(y, b.yp, s, r);
  if (t.shared_gate_up >= 0) shared_add<A>(ctx, t, m, x, y);
  if (ctx.router) ctx.router->add_exchange(time.exposed, time.hidden, 0);
}

// Its backward: the pairs' output gradients out to the owners, the local
// experts' backward, the input gradients back, the router's backward.
template <class A>
void backward_spread(const BlockContext& ctx, const Tensors& t, const Acts& m, const A* x, const float* dy, float* dx,
                     const BackwardWork<A>& work, const RouterLossGrad& losses) {
  const Shape s = shape_of(ctx.cfg, ctx.N(), ctx.tp.size(), ctx.ep_group->size());
  const ParamAccess& w = ctx.p;
  const Routing r = routing(m);
  const Buffers<A> b = buffers<A>(m);
  const ExchangeLayout x_at = exchange_layout(m);
  Backend& eng = ctx.ops;
  A* dys = static_cast<A*>(ctx.work.moe_send);
  combine_backward<A>(work.dlogits, dys, dy, b.yp, s, r, losses);
  // The output gradients travel while the shared expert's backward runs
  // (into dx; the router's part is added after).
  PendingDispatch<A> grads(*ctx.ep_group, dys, s, r, x_at, reinterpret_cast<A*>(ctx.work.moe_stage), work.dyp);
  std::fill(dx, dx + size_t(s.N) * s.C, 0.f);
  // (Its gate's [N] scratch: the balancing losses' buffer, read by combine_backward already.)
  if (t.shared_gate_up >= 0) shared_backward<A>(ctx, t, m, x, dy, dx, ctx.work.moe_seq, [&] { grads.poke(); });
  ExchangeTime time = grads.finish();
  experts_backward<A>(eng, x_at.rows(s), work.dyp, work.dxp, work.dhidden, work.dgate_up, b.xp, b.gate_up, b.hidden,
                      w.weight<A>(t.gate_up), w.weight<A>(t.down), w.grad(t.gate_up), w.grad(t.down), s.C, s.F);
  float* dxs = ctx.work.moe_local;
  time.exposed += gather_back<float>(*ctx.ep_group, work.dxp, s, r, x_at, ctx.work.moe_stage, dxs);
  router_backward<A>(eng, dx, w.grad(t.router), work.dlogits, x, b.x32, w.param(t.router), dxs, s, r, true);
  int64_t rows = 0;
  for (int e = 0; e < s.local_experts(); e++) rows += x_at.count[e];
  if (ctx.router) ctx.router->add_exchange(time.exposed, time.hidden, rows);
}

template <class A>
void mlp_forward(const BlockContext& ctx, int layer, const Tensors& t, const Acts& m, const A* x, float* out,
                 const float* residual) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const float* bias = ctx.router ? ctx.router->bias(layer) : nullptr;
  // Sequence parallel: the partial sums of every row, reduce-scattered to this rank's.
  float* y = ctx.tp.sequence_parallel() ? ctx.work.grad_work : out;
  if (experts_spread(ctx))
    forward_spread<A>(ctx, t, m, x, bias, y);
  else
    forward<A>(ctx.ops, y, x, w.param(t.router), bias, w.weight<A>(t.gate_up), w.weight<A>(t.down),
               shape_of(ctx.cfg, N, ctx.tp.size()), routing(m), buffers<A>(m));
  if (ctx.router) ctx.router->set_forward_counts(ctx.slot, layer, routing(m).count);
  if (t.shared_gate_up >= 0 && !experts_spread(ctx)) shared_forward<A>(ctx, t, m, x, y);  // (spread: inside)
  ctx.tp.reduce_rows(y, out, N, C);
  ctx.ops.residual_bias_forward(out, out, nullptr, residual, ctx.R(), C);
}

template <class A>
void mlp_backward(const BlockContext& ctx, int layer, const Tensors& t, const Acts& m, const A* x, const float* dres,
                  float* dnorm) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  const Shape s = shape_of(ctx.cfg, N, ctx.tp.size());
  const Routing r = routing(m);
  // The router losses: whole terms, the same on every tp rank, so added on
  // the first alone (the router's gradient and the input's are sums over tp).
  RouterLossGrad losses;
  if (ctx.tp.rank() == 0 && ctx.router) {
    if (ctx.cfg.moe_z_coef > 0) {
      losses.z_weight = float(ctx.cfg.moe_z_coef) * ctx.router->loss_weight();
      double z = 0;
      for (int n = 0; n < N; n++) z += double(r.lse[n]) * r.lse[n];
      ctx.router->add_z(z);
    }
    if (ctx.cfg.moe_balance == MoeBalance::sequence && ctx.cfg.moe_aux_coef > 0) {
      ctx.router->add_balance(sequence_balance(ctx, s, r, k.moe_seq));
      losses.seq_dprob = k.moe_seq, losses.T = ctx.T;
    }
    if (ctx.cfg.moe_balance == MoeBalance::switch_ && ctx.cfg.moe_aux_coef > 0) {
      ctx.router->add_balance(switch_balance(ctx, s, r, k.moe_seq));
      losses.seq_dprob = k.moe_seq, losses.T = N;  // one gradient for every row
    }
  }
  if (ctx.router) ctx.router->add_counts(layer, r.count);
  const BackwardWork<A> work{k.moe_dxp, k.moe_dhidden, static_cast<A*>(k.moe_dyp), static_cast<A*>(k.moe_dgate_up),
                             k.moe_dlogits};
  // Sequence parallel: the output gradient and the input of every row
  // gathered; the input gradient's partial sums reduce-scattered.
  const bool sp = ctx.tp.sequence_parallel();
  const float* dy = ctx.tp.gather_rows(dres, k.moe_dy, N, C);
  x = ctx.tp.gather_rows(x, static_cast<A*>(k.gathered), N, C);
  float* dx = sp ? k.grad_work : dnorm;
  if (experts_spread(ctx))
    backward_spread<A>(ctx, t, m, x, dy, dx, work, losses);
  else
    backward<A>(ctx.ops, dx, w.grad(t.router), w.grad(t.gate_up), w.grad(t.down), dy, x, w.param(t.router),
                w.weight<A>(t.gate_up), w.weight<A>(t.down), s, r, buffers<A>(m), work, losses);
  ctx.grad_ready(t.router), ctx.grad_ready(t.gate_up), ctx.grad_ready(t.down);
  if (t.shared_gate_up >= 0 && !experts_spread(ctx))
    shared_backward<A>(ctx, t, m, x, dy, dx, k.moe_dlogits, [] {});  // the routed experts' backward is done with it
  ctx.tp.reduce_rows(dx, dnorm, N, C);
}

#define LOOM_MOE_BLOCK(A)                                                                                   \
  template void mlp_forward<A>(const BlockContext&, int, const Tensors&, const Acts&, const A*, float*,      \
                               const float*);                                                               \
  template void mlp_backward<A>(const BlockContext&, int, const Tensors&, const Acts&, const A*, const float*, \
                                float*);
LOOM_MOE_BLOCK(float)
LOOM_MOE_BLOCK(bf16)
LOOM_MOE_BLOCK(f16)
#undef LOOM_MOE_BLOCK

}  // namespace loom::moe
