// The mixture-of-experts MLP inside a block (the mixtral family's MoE
// blocks, model/llama/llama_block.cpp), on moe_layer's math: what a block
// keeps for backward, the shared work space, and the MLP's forward and
// backward between the block's norm and its residual.
//
// Tensor parallelism splits every expert's width as the dense MLP's: each
// rank runs all E experts on its F / tp columns, its output is a partial sum
// reduced over tp with the residual added (as a row-parallel product), and
// the router (whole on every rank, the same routing everywhere) gets a
// partial gradient summed over tp (ParamSpec::tp_partial). Sequence
// parallelism: the norm's output is gathered before (as for the dense MLP),
// the output's partial sums reduce-scattered after; backward gathers the
// output gradient and the input, and reduce-scatters the input gradient. The
// experts' and router's weight gradients are computed in the block's
// backward, also in a split (zero-bubble) backward.
//
// Expert parallelism (ctx.ep_group of ep > 1 ranks): the routed pairs go to
// their experts' owners and back (model/moe/expert_exchange.h) between the
// routing and the combine; each rank runs its E / ep experts over the rows
// every rank of its ep group sent. Experts stay split over tp as above: the
// ep group's ranks share a tp rank, so each tp rank exchanges its own
// copy of the routed tokens and runs its slice of the local experts' width
// (no extra gather or split; the cost is tp copies of the all-to-all's
// volume, which a tp group inside one node keeps off the network anyway).
#pragma once

#include <cstdint>

#include "model/block_context.h"
#include "model/moe/expert_exchange.h"
#include "model/moe/moe_layer.h"

namespace loom::moe {

// What an MoE block keeps for backward: the permuted buffers and the routing.
struct Acts {
  void *xp = nullptr, *gate_up = nullptr, *hidden = nullptr;  // A
  float *yp = nullptr, *x32 = nullptr, *prob = nullptr, *weight = nullptr, *lse = nullptr;
  void *expert = nullptr, *row = nullptr, *count = nullptr, *first = nullptr;  // int32
  // Expert parallelism (ep > 1): the owner's ExchangeLayout (int32).
  void *recv_count = nullptr, *local_first = nullptr, *local_count = nullptr;
  // The shared expert (model.moe_shared_ffn): its gate/up and SwiGLU output
  // (A, [N, 2 Fs/tp] and [N, Fs/tp]), its output's partial sums (fp32 [N, C])
  // and each token's gate sigmoid(x . w_gate) (fp32 [N]).
  void *shared_gate_up = nullptr, *shared_hidden = nullptr;
  float *shared_out = nullptr, *shared_score = nullptr;
};

// An MoE block's tensors (layout indices; the shared expert's -1 when none).
struct Tensors {
  int router = -1, gate_up = -1, down = -1;
  int shared_gate_up = -1, shared_down = -1, shared_gate = -1;
};

inline Shape shape_of(const ModelConfig& cfg, int N, int tp, int ep = 1) {
  return Shape{N,       cfg.d_model,         cfg.n_experts, cfg.top_k, cfg.expert_ffn() / tp, cfg.moe_sigmoid,
               cfg.moe_renormalize, ep};
}

inline void plan_acts(ActivationPlan& plan, Acts& m, const ModelConfig& cfg, int N, int tp, int ep, size_t a) {
  const Shape s = shape_of(cfg, N, tp, ep);
  const size_t NK = size_t(s.pairs()), P = size_t(s.padded_rows()), C = size_t(s.C), F = size_t(s.F),
               E = size_t(s.E), routed = size_t(s.routed_rows());
  plan.want(&m.xp, P * C, a), plan.want(&m.gate_up, P * 2 * F, a), plan.want(&m.hidden, P * F, a);
  plan.want(&m.yp, std::max(routed * C, size_t(N) * E)), plan.want(&m.x32, size_t(N) * C);
  plan.want(&m.prob, size_t(N) * E), plan.want(&m.weight, NK), plan.want(&m.lse, size_t(N));
  plan.want(&m.expert, NK, 4), plan.want(&m.row, NK, 4), plan.want(&m.count, E, 4), plan.want(&m.first, E + 1, 4);
  if (ep > 1) {
    const size_t El = size_t(s.local_experts());
    plan.want(&m.recv_count, size_t(ep) * El, 4), plan.want(&m.local_first, El + 1, 4);
    plan.want(&m.local_count, El, 4);
  }
  if (cfg.moe_shared_ffn > 0) {
    const size_t Fs = size_t(cfg.moe_shared_ffn / tp);
    plan.want(&m.shared_gate_up, size_t(N) * 2 * Fs, a), plan.want(&m.shared_hidden, size_t(N) * Fs, a);
    plan.want(&m.shared_out, size_t(N) * C), plan.want(&m.shared_score, size_t(N));
  }
}

inline void plan_work(ActivationPlan& plan, BlockWork& w, const ModelConfig& cfg, int N, const TensorParallel& tp,
                      int ep, size_t a) {
  const Shape s = shape_of(cfg, N, tp.size(), ep);
  const size_t P = size_t(s.padded_rows()), C = size_t(s.C), F = size_t(s.F);
  plan.want(&w.moe_dxp, P * C), plan.want(&w.moe_dhidden, P * F), plan.want(&w.moe_dyp, P * C, a);
  plan.want(&w.moe_dgate_up, P * 2 * F, a), plan.want(&w.moe_dlogits, size_t(N) * s.E);
  if (ep > 1) {  // the routed rows to send, the all-to-all's staging, the owner's outputs
    const size_t NK = size_t(s.pairs());
    plan.want(&w.moe_send, NK * C, a), plan.want(&w.moe_stage, size_t(ep) * NK * C), plan.want(&w.moe_local, P * C);
  }
  plan.want(&w.moe_seq, size_t(N) * s.E);
  if (tp.sequence_parallel()) plan.want(&w.moe_dy, size_t(N) * size_t(s.C));
  if (cfg.moe_shared_ffn > 0) {
    const size_t Fs = size_t(cfg.moe_shared_ffn / tp.size());
    plan.want(&w.moe_shared_dy, size_t(N) * C, a), plan.want(&w.moe_shared_dhidden, size_t(N) * Fs);
    plan.want(&w.moe_shared_dgate_up, size_t(N) * 2 * Fs, a);
  }
}

inline Routing routing(const Acts& m) {
  return {m.prob, static_cast<int32_t*>(m.expert), m.weight, static_cast<int32_t*>(m.row),
          static_cast<int32_t*>(m.count), static_cast<int32_t*>(m.first), m.lse};
}

inline ExchangeLayout exchange_layout(const Acts& m) {
  return {static_cast<int32_t*>(m.recv_count), static_cast<int32_t*>(m.local_first),
          static_cast<int32_t*>(m.local_count)};
}

template <class A>
Buffers<A> buffers(const Acts& m) {
  return {static_cast<A*>(m.xp), static_cast<A*>(m.gate_up), static_cast<A*>(m.hidden), m.yp, m.x32};
}

// out[R, C] = reduce_tp(moe(x[N, C])) + residual[R, C]; layer: the block's
// global index (its balancing bias).
template <class A>
void mlp_forward(const BlockContext& ctx, int layer, const Tensors& t, const Acts& m, const A* x, float* out,
                 const float* residual);

// From dres[N, C] (the block output's gradient, every row): dnorm[N, C] =
// reduce_tp(the MoE input's gradient); the router's and experts' gradients
// added, with the router losses'; the step's counts and loss sums recorded
// in ctx.router.
template <class A>
void mlp_backward(const BlockContext& ctx, int layer, const Tensors& t, const Acts& m, const A* x, const float* dres,
                  float* dnorm);

}  // namespace loom::moe
