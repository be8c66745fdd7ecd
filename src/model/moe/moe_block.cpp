#include "model/moe/moe_block.h"

#include <algorithm>

#include "comm/communicator.h"
#include "kernels/cpu/residual.h"
#include "model/moe/router_state.h"

namespace loom::moe {
namespace {

// Per-sequence balancing (MoeBalance::sequence), on each sequence's own
// tokens: f_e = E / (k T) x its pairs routed to e, P_e = the mean of p_e,
// loss coef x sum_e f_e P_e, weighted by the sequence's T tokens like the
// main loss (so its gradient on each p_te is coef x target weight x f_e).
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
  const float weight = float(ctx.cfg.moe_aux_coef) * ctx.target_weight;
  double value = 0;
  for (int b = 0; b < B; b++)
    for (int e = 0; e < E; e++) {
      const double f = per_pair * seq[size_t(b) * E + e];
      double psum = 0;
      for (int t = 0; t < T; t++) psum += r.prob[(size_t(b) * T + t) * E + e];
      value += f * psum;
      seq[size_t(b) * E + e] = weight * float(f);
    }
  return value;
}

}  // namespace

template <class A>
void mlp_forward(const BlockContext& ctx, int layer, int router, int gate_up, int down, const Acts& m, const A* x,
                 float* out, const float* residual) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const float* bias = ctx.router ? ctx.router->bias(layer) : nullptr;
  forward<A>(ctx.ops.matmul(), out, x, w.param(router), bias, w.weight<A>(gate_up), w.weight<A>(down),
             shape_of(ctx.cfg, N, ctx.tp.size()), routing(m), buffers<A>(m));
  ctx.tp.reduce_rows(out, out, N, C);
  cpu::residual_bias_forward(out, out, nullptr, residual, N, C);
}

template <class A>
void mlp_backward(const BlockContext& ctx, int layer, int router, int gate_up, int down, const Acts& m, const A* x,
                  const float* dres, float* dnorm) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  const Shape s = shape_of(ctx.cfg, N, ctx.tp.size());
  const Routing r = routing(m);
  // The router losses: whole terms, the same on every tp rank, so added on
  // the first alone (the router's gradient and the input's are sums over tp).
  RouterLossGrad losses;
  if (ctx.tp.rank() == 0) {
    if (ctx.cfg.moe_z_coef > 0) {
      losses.z_weight = float(ctx.cfg.moe_z_coef) * ctx.target_weight;
      double z = 0;
      for (int n = 0; n < N; n++) z += double(r.lse[n]) * r.lse[n];
      if (ctx.router) ctx.router->add_z(z);
    }
    if (ctx.cfg.moe_balance == MoeBalance::sequence && ctx.cfg.moe_aux_coef > 0) {
      const double v = sequence_balance(ctx, s, r, k.moe_seq);
      if (ctx.router) ctx.router->add_balance(v);
      losses.seq_dprob = k.moe_seq, losses.T = ctx.T;
    }
  }
  if (ctx.router) ctx.router->add_counts(layer, r.count);
  const BackwardWork<A> work{k.moe_dxp, k.moe_dhidden, static_cast<A*>(k.moe_dyp), static_cast<A*>(k.moe_dgate_up),
                             k.moe_dlogits};
  backward<A>(ctx.ops.matmul(), dnorm, w.grad(router), w.grad(gate_up), w.grad(down), dres, x, w.param(router),
              w.weight<A>(gate_up), w.weight<A>(down), s, r, buffers<A>(m), work, losses);
  ctx.grad_ready(router), ctx.grad_ready(gate_up), ctx.grad_ready(down);
  ctx.tp.reduce_rows(dnorm, dnorm, N, C);
}

#define LOOM_MOE_BLOCK(A)                                                                                        \
  template void mlp_forward<A>(const BlockContext&, int, int, int, int, const Acts&, const A*, float*,           \
                               const float*);                                                                    \
  template void mlp_backward<A>(const BlockContext&, int, int, int, int, const Acts&, const A*, const float*, float*);
LOOM_MOE_BLOCK(float)
LOOM_MOE_BLOCK(bf16)
LOOM_MOE_BLOCK(f16)
#undef LOOM_MOE_BLOCK

}  // namespace loom::moe
