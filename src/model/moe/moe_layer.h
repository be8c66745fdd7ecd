// A mixture-of-experts MLP on one rank's tokens (issue 40's layer; the
// family and its layouts build on it): a router, top-k of E SwiGLU experts,
// dropless, as Mixtral's sparse block computes it.
//
//   logits[N, E] = x Wr^T (fp32: the router is kept in fp32)
//   p = softmax(logits) (or, Shape::sigmoid, sigmoid(logits) per expert);
//   the k experts of the largest p + bias (bias: the
//   auxiliary-loss-free balancing's, for selection only; ties to the lowest
//   expert index); weights w = p over the chosen, renormalised to sum 1
//   (Shape::renormalize; else w = p)
//   y[n] = sum_j w[n, j] expert_{e(n, j)}(x[n]),  expert(x) = (silu(x G^T) * (x U^T)) D^T
//
// Dropless: every token reaches its k experts. The N k (token, expert) pairs
// are permuted so each expert's rows are contiguous (a counting sort,
// tokens in order within an expert) and each expert runs one product over
// its rows (rounded up to Shape::kRowAlign, zero rows); the outputs are
// combined back in fp32 in a fixed order (j = 0 .. k-1). Every buffer is
// Shape::padded_rows() whatever the routing: no step allocates.
//
// Types: x and the expert weights in the compute type A (float, bf16, f16);
// the router weight, the combine and every gradient fp32. The expert weights
// are stacked: w_gate_up [E, 2F, C] (gate's rows, then up's, as loom's fused
// dense MLP), w_down [E, C, F].
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"

namespace loom::moe {

constexpr int kMaxTopK = 64;  // experts per token at most

struct Shape {
  int N = 0;  // tokens
  int C = 0;  // model width
  int E = 0;  // experts
  int k = 0;  // experts per token, 1..min(E, kMaxTopK)
  int F = 0;  // an expert's MLP width
  bool sigmoid = false;  // the router's scores: each expert's sigmoid (DeepSeek-V3), else the softmax
  bool renormalize = true;  // the chosen scores over their sum as weights (else as they are)
  // Expert parallelism: the experts are spread over ep ranks (E / ep each);
  // this rank's pairs leave in expert order, unpadded, and the rows an
  // owner runs arrive from every rank of its group (model/moe/expert_exchange.h).
  int ep = 1;
  int64_t pairs() const { return int64_t(N) * k; }
  int local_experts() const { return E / ep; }
  // Each expert's rows start at a multiple of kRowAlign and its products run
  // over its rows rounded up to one (the padding rows hold zeros): a
  // product's shape then takes one of pairs() / kRowAlign + E values, so the
  // GEMM library's primitives made for them are reused from step to step
  // instead of made anew for every routing (which cost more than the
  // experts' products themselves). The per-pair buffers have padded_rows().
  static constexpr int kRowAlign = 32;
  // The rows the local experts run at most: every pair (with ep, every pair
  // of the ep group's ranks: dropless means any routing fits), each expert
  // padded. The per-pair buffers of the experts have padded_rows().
  int64_t padded_rows() const { return int64_t(ep) * pairs() + int64_t(local_experts()) * (kRowAlign - 1); }
  // The routing's rows: padded for this rank's experts' products (ep 1) or
  // unpadded, in expert order, to be sent (ep > 1).
  int route_align() const { return ep == 1 ? kRowAlign : 1; }
  int64_t routed_rows() const { return ep == 1 ? padded_rows() : pairs(); }
};

// What forward decides and backward reads again (planned buffers: a step
// allocates nothing).
struct Routing {
  float* prob = nullptr;      // [N, E] the scores: softmax (or sigmoid) of the logits
  int32_t* expert = nullptr;  // [N, k] chosen experts, by descending score
  float* weight = nullptr;    // [N, k] combine weights
  int32_t* row = nullptr;     // [N, k] the pair's row in the permuted buffers
  int32_t* count = nullptr;   // [E] rows per expert (pairs routed to it)
  int32_t* first = nullptr;   // [E + 1] each expert's first row (multiples of Shape::route_align())
  float* lse = nullptr;       // [N] logsumexp of the logits (the z-loss's)
};

// Routing's arrays in vectors of their own (tests, tools).
struct RoutingStorage {
  std::vector<float> prob, weight, lse;
  std::vector<int32_t> expert, row, count, first;
  Routing view(const Shape& s);
};

// The rows the local experts run: expert e's count[e] rows start at
// first[e] (padded to Shape::kRowAlign, the padding rows zero).
struct ExpertRows {
  int experts = 0;
  const int32_t* first = nullptr;  // [experts + 1]
  const int32_t* count = nullptr;  // [experts]
};

// The per-pair buffers forward fills and backward reads: the experts' rows
// (Shape::padded_rows() each) and the routed pairs' outputs.
template <class A>
struct Buffers {
  A* xp = nullptr;        // [P, C] the tokens, permuted
  A* gate_up = nullptr;   // [P, 2F]
  A* hidden = nullptr;    // [P, F] silu(gate) * up
  float* yp = nullptr;    // [routed_rows, C] the pairs' outputs, by routing row (also the logits' [N, E] first)
  float* x32 = nullptr;   // [N, C] x in fp32 for the router (A = float: unused)
};

// Backward's work space, in padded rows P: fp32 [P, C] (dxp), [P, F]
// (dhidden), A [P, C] (the weighted output gradient), A [P, 2F] (dgate_up),
// fp32 [N, E] (dlogits).
template <class A>
struct BackwardWork {
  float* dxp = nullptr;
  float* dhidden = nullptr;
  A* dyp = nullptr;
  A* dgate_up = nullptr;
  float* dlogits = nullptr;
};

// v in the compute type A (rounded to nearest even).
template <class A>
A from_f32(float v) {
  if constexpr (std::is_same_v<A, float>) return v;
  else if constexpr (std::is_same_v<A, bf16>) return float_to_bf16(v);
  else return float_to_f16(v);
}

// C[M,N] (+)= op(A) op(B) with fp32 C, on the engine the layers use (an
// empty product writes zeros unless it accumulates).
template <class A>
void product(Backend& eng, float* c, const A* a, const A* b, int64_t M, int64_t N, int64_t K, bool ta,
             bool tb, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an expert without rows: nothing to add
    if (!accumulate) std::fill(c, c + M * N, 0.f);
    return;
  }
  eng.gemm(c, a, b, M, N, K, ta, tb, accumulate);
}

// C[M,N] = A B^T with C in the compute type (rounded once).
template <class A>
void product_out(Backend& eng, A* c, const A* a, const A* b, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  eng.gemm(c, a, b, M, N, K, false, true);
}

// The router losses' gradients backward adds at the router (each already
// weighted like the main loss: coefficient x the loss scale over the batch's
// counted targets).
struct RouterLossGrad {
  float z_weight = 0;                // z-loss: dlogit_e += z_weight x 2 lse p_e
  // [N / T, E]: added to the gradient of each of a sequence's T rows'
  // probabilities (sigmoid scores: of the scores normalised to sum 1).
  const float* seq_dprob = nullptr;
  int T = 0;
};

// --- The parts (the expert-parallel path puts its exchange between them). ---

// The router's logits (into b.yp) and the routing (r), then each pair's
// token copied to its routing row of xs [routed_rows, C].
template <class A>
void route_tokens(Backend& eng, A* xs, const A* x, const float* w_router, const float* bias,
                  const Shape& s, const Routing& r, const Buffers<A>& b);
// Every local expert over its rows: gate_up, hidden and yp [P, C] from xp
// (its padding rows zeroed first). Weights: the local experts' stacks.
template <class A>
void experts_forward(Backend& eng, const ExpertRows& rows, A* xp, A* gate_up, A* hidden, float* yp,
                     const A* w_gate_up, const A* w_down, int C, int F);
// y[n] = sum_j weight[n, j] ys[row[n, j]] in fp32, slot by slot.
void combine(float* y, const float* ys, const Shape& s, const Routing& r);
// Combine's backward: each pair's output gradient weight x dy into its
// routing row of dys (compute type) and the router's dlogits [N, E] (with
// the router losses').
template <class A>
void combine_backward(float* dlogits, A* dys, const float* dy, const float* ys, const Shape& s, const Routing& r,
                      const RouterLossGrad& losses);
// The local experts' backward from dyp [P, C] (its padding rows zeroed
// first): dxp [P, C] fp32 written, the weights' gradients added (null:
// frozen, skipped).
template <class A>
void experts_backward(Backend& eng, const ExpertRows& rows, A* dyp, float* dxp, float* dhidden,
                      A* dgate_up, const A* xp, const A* gate_up, const A* hidden, const A* w_gate_up,
                      const A* w_down, float* dw_gate_up, float* dw_down, int C, int F);
// The router's backward: dWr += dlogits^T x, dx (+)= dlogits Wr + sum_j dxs[row[n, j]].
template <class A>
void router_backward(Backend& eng, float* dx, float* dw_router, const float* dlogits, const A* x,
                     float* x32, const float* w_router, const float* dxs, const Shape& s, const Routing& r,
                     bool accumulate = false);

// y[N, C] (written) from x[N, C] on one rank holding every expert (ep 1).
// bias [E] may be null.
template <class A>
void forward(Backend& eng, float* y, const A* x, const float* w_router, const float* bias,
             const A* w_gate_up, const A* w_down, const Shape& s, const Routing& r, const Buffers<A>& b);


// From dy[N, C]: dx[N, C] (written), and the weights' gradients added to
// (fp32: dw_router [E, C], dw_gate_up [E, 2F, C], dw_down [E, C, F]; a
// null one, a frozen tensor's, is skipped).
template <class A>
void backward(Backend& eng, float* dx, float* dw_router, float* dw_gate_up, float* dw_down,
              const float* dy, const A* x, const float* w_router, const A* w_gate_up, const A* w_down,
              const Shape& s, const Routing& r, const Buffers<A>& b, const BackwardWork<A>& w,
              const RouterLossGrad& losses = {});

}  // namespace loom::moe
