#include "model/moe/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace loom::moe {
namespace {

template <class A>
const float* widened(Backend& eng, const A* x, float* to, size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    (void)eng, (void)to, (void)n;
    return x;
  } else {
    eng.widen(to, x, n);
    return to;
  }
}

// Rows rounded up to a multiple of align.
int64_t padded(int64_t rows, int align) { return (rows + align - 1) / align * align; }

// Zeroes each expert's padding rows of buf [rows, width].
template <class T>
void zero_padding(T* buf, int64_t width, const ExpertRows& rows) {
  for (int e = 0; e < rows.experts; e++) {
    const int64_t end = rows.first[size_t(e)] + rows.count[size_t(e)], stop = rows.first[size_t(e) + 1];
    std::fill(buf + end * width, buf + stop * width, T{});
  }
}

// Softmax, top-k (ties: the lower expert), renormalised weights, and the
// counting sort that gives each pair its row.
void route(const float* logits, const float* bias, const Shape& s, const Routing& r) {
  const int E = s.E, k = s.k;
  // Each token on its own (any thread count gives the same routing).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; n++) {
    const float* l = logits + size_t(n) * E;
    float* p = r.prob + size_t(n) * E;
    const float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; e++) p[e] = std::exp(l[e] - mx), sum += p[e];
    if (s.sigmoid)
      for (int e = 0; e < E; e++) p[e] = 1.f / (1.f + std::exp(-l[e]));
    else
      for (int e = 0; e < E; e++) p[e] = float(p[e] / sum);
    r.lse[n] = mx + float(std::log(sum));
    int32_t* chosen = r.expert + size_t(n) * k;
    // k passes of argmax over the not yet chosen: small k, and ties go low.
    for (int j = 0; j < k; j++) {
      int best = -1;
      float best_score = 0;
      for (int e = 0; e < E; e++) {
        if (std::find(chosen, chosen + j, e) != chosen + j) continue;
        const float score = p[e] + (bias ? bias[e] : 0.f);
        if (best < 0 || score > best_score) best = e, best_score = score;
      }
      chosen[j] = best;
    }
    float total = 0;
    for (int j = 0; j < k; j++) total += p[chosen[j]];
    if (!s.renormalize) total = 1;
    for (int j = 0; j < k; j++) r.weight[size_t(n) * k + j] = p[chosen[j]] / total;
  }
  std::fill(r.count, r.count + E, 0);
  for (int64_t i = 0; i < s.pairs(); i++) r.count[size_t(r.expert[size_t(i)])]++;
  r.first[0] = 0;
  for (int e = 0; e < E; e++) r.first[size_t(e) + 1] = r.first[size_t(e)] + int32_t(padded(r.count[size_t(e)], s.route_align()));
  int32_t* next = r.count;  // reused as each expert's next free row, then restored
  for (int e = 0; e < E; e++) next[size_t(e)] = r.first[size_t(e)];
  for (int64_t i = 0; i < s.pairs(); i++) r.row[size_t(i)] = next[size_t(r.expert[size_t(i)])]++;
  for (int e = 0; e < E; e++) r.count[size_t(e)] = next[size_t(e)] - r.first[size_t(e)];
}

}  // namespace

Routing RoutingStorage::view(const Shape& s) {
  prob.resize(size_t(s.N) * s.E), weight.resize(size_t(s.pairs())), lse.resize(size_t(s.N));
  expert.resize(size_t(s.pairs())), row.resize(size_t(s.pairs()));
  count.resize(size_t(s.E)), first.resize(size_t(s.E) + 1);
  return {prob.data(), expert.data(), weight.data(), row.data(), count.data(), first.data(), lse.data()};
}

template <class A>
void route_tokens(Backend& eng, A* xs, const A* x, const float* w_router, const float* bias,
                  const Shape& s, const Routing& r, const Buffers<A>& b) {
  const int C = s.C, k = s.k;
  // Router in fp32: logits into yp's first N x E floats (free until the experts' outputs arrive).
  const float* x32 = widened(eng, x, b.x32, size_t(s.N) * C);
  float* logits = b.yp;
  eng.gemm(logits, x32, w_router, s.N, s.E, C, false, true, false);
  route(logits, bias, s, r);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; n++)
    for (int j = 0; j < k; j++)
      std::memcpy(xs + size_t(r.row[size_t(n) * k + j]) * C, x + size_t(n) * C, size_t(C) * sizeof(A));
}

template <class A>
void experts_forward(Backend& eng, const ExpertRows& rows, A* xp, A* gate_up, A* hidden, float* yp,
                     const A* w_gate_up, const A* w_down, int C, int F) {
  zero_padding(xp, C, rows);  // zero rows in: zero rows out, all the way through backward
  // Each expert: one product over its (padded) rows for gate/up, SwiGLU, one for down.
  for (int e = 0; e < rows.experts; e++) {
    const int64_t n = rows.first[size_t(e) + 1] - rows.first[size_t(e)], at = rows.first[size_t(e)];
    if (n == 0) continue;
    product_out<A>(eng, gate_up + at * 2 * F, xp + at * C, w_gate_up + int64_t(e) * 2 * F * C, n, 2 * F, C);
    eng.swiglu_forward(hidden + at * F, gate_up + at * 2 * F, int(n), F);
    product<A>(eng, yp + at * C, hidden + at * F, w_down + int64_t(e) * C * F, n, C, F, false, true, false);
  }
}

void combine(float* y, const float* ys, const Shape& s, const Routing& r) {
  const int C = s.C, k = s.k;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; n++) {
    float* out = y + size_t(n) * C;
    std::fill(out, out + C, 0.f);
    for (int j = 0; j < k; j++) {
      const float w = r.weight[size_t(n) * k + j];
      const float* from = ys + size_t(r.row[size_t(n) * k + j]) * C;
      for (int c = 0; c < C; c++) out[c] += w * from[c];
    }
  }
}

template <class A>
void forward(Backend& eng, float* y, const A* x, const float* w_router, const float* bias,
             const A* w_gate_up, const A* w_down, const Shape& s, const Routing& r, const Buffers<A>& b) {
  route_tokens<A>(eng, b.xp, x, w_router, bias, s, r, b);
  experts_forward<A>(eng, ExpertRows{s.E, r.first, r.count}, b.xp, b.gate_up, b.hidden, b.yp, w_gate_up, w_down, s.C,
                     s.F);
  combine(y, b.yp, s, r);
}

template <class A>
void combine_backward(float* dlogits, A* dys, const float* dy, const float* ys, const Shape& s, const Routing& r,
                      const RouterLossGrad& losses) {
  const int C = s.C, E = s.E, k = s.k;
  // Each pair's output gradient w dy (in the compute type, as the products
  // read it) and its weight's gradient dy . yp.
  std::fill(dlogits, dlogits + size_t(s.N) * E, 0.f);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; n++) {
    const float* g = dy + size_t(n) * C;
    const float* p = r.prob + size_t(n) * E;
    float dws[kMaxTopK];
    float total = 0, weighted = 0;
    for (int j = 0; j < k; j++) {
      const size_t pair = size_t(n) * k + j;
      const float wt = r.weight[pair];
      const float* yp = ys + size_t(r.row[pair]) * C;
      A* to = dys + size_t(r.row[pair]) * C;
      double dot = 0;
      for (int c = 0; c < C; c++) to[c] = from_f32<A>(wt * g[c]), dot += double(g[c]) * yp[c];
      dws[j] = float(dot);
      total += p[r.expert[pair]];
      weighted += dws[j] * wt;
    }
    // w_j = p_j / S over the chosen: dp_j = (dw_j - sum_i w_i dw_i) / S;
    // then the softmax: dlogit_e = p_e (dp_e - sum_m p_m dp_m), or the
    // sigmoid's dlogit_e = p_e (1 - p_e) dp_e.
    float* dl = dlogits + size_t(n) * E;
    float pdp = 0;
    for (int j = 0; j < k; j++) {
      const int e = r.expert[size_t(n) * k + j];
      dl[e] = s.renormalize ? (dws[j] - weighted) / total : dws[j];  // dp, for now
      pdp += p[e] * dl[e];
    }
    if (losses.seq_dprob) {  // a loss on every probability of the token
      const float* extra = losses.seq_dprob + size_t(n / losses.T) * E;
      if (s.sigmoid) {  // on q = p / sum p: dp_j = (g_j - sum_e g_e q_e) / sum p
        float sp = 0, gq = 0;
        for (int e = 0; e < E; e++) sp += p[e], gq += extra[e] * p[e];
        gq /= sp;
        for (int e = 0; e < E; e++) dl[e] += (extra[e] - gq) / sp;
      } else {
        for (int e = 0; e < E; e++) dl[e] += extra[e], pdp += p[e] * extra[e];
      }
    }
    if (s.sigmoid)
      for (int e = 0; e < E; e++) dl[e] *= p[e] * (1.f - p[e]);
    else
      for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - pdp);
    if (losses.z_weight != 0) {  // d(lse^2)/dlogit_e = 2 lse p_e
      const float zg = losses.z_weight * 2.f * r.lse[n];
      for (int e = 0; e < E; e++) dl[e] += zg * p[e];
    }
  }
}

template <class A>
void experts_backward(Backend& eng, const ExpertRows& rows, A* dyp, float* dxp, float* dhidden,
                      A* dgate_up, const A* xp, const A* gate_up, const A* hidden, const A* w_gate_up,
                      const A* w_down, float* dw_gate_up, float* dw_down, int C, int F) {
  zero_padding(dyp, C, rows);  // the padding rows add nothing to the weights' gradients
  for (int e = 0; e < rows.experts; e++) {
    const int64_t n = rows.first[size_t(e) + 1] - rows.first[size_t(e)], at = rows.first[size_t(e)];
    if (n == 0) continue;
    const A* wd = w_down + int64_t(e) * C * F;
    const A* wgu = w_gate_up + int64_t(e) * 2 * F * C;
    product<A>(eng, dhidden + at * F, dyp + at * C, wd, n, F, C, false, false, false);  // dyp wd
    if (dw_down) product<A>(eng, dw_down + int64_t(e) * C * F, dyp + at * C, hidden + at * F, C, F, n, true, false, true);
    eng.swiglu_backward(dgate_up + at * 2 * F, gate_up + at * 2 * F, dhidden + at * F, int(n), F);
    if (dw_gate_up)
      product<A>(eng, dw_gate_up + int64_t(e) * 2 * F * C, dgate_up + at * 2 * F, xp + at * C, 2 * F, C, n, true,
                 false, true);
    product<A>(eng, dxp + at * C, dgate_up + at * 2 * F, wgu, n, C, 2 * F, false, false, false);
  }
}

template <class A>
void router_backward(Backend& eng, float* dx, float* dw_router, const float* dlogits, const A* x,
                     float* x32, const float* w_router, const float* dxs, const Shape& s, const Routing& r,
                     bool accumulate) {
  const int C = s.C, E = s.E, k = s.k;
  // dWr += dlogits^T x, dx = dlogits Wr, then each pair's input gradient added back.
  const float* x32w = widened(eng, x, x32, size_t(s.N) * C);
  if (dw_router) eng.gemm(dw_router, dlogits, x32w, E, C, s.N, true, false, true);
  eng.gemm(dx, dlogits, w_router, s.N, C, E, false, false, accumulate);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.N; n++)
    for (int j = 0; j < k; j++) {
      const float* from = dxs + size_t(r.row[size_t(n) * k + j]) * C;
      float* to = dx + size_t(n) * C;
      for (int c = 0; c < C; c++) to[c] += from[c];
    }
}

template <class A>
void backward(Backend& eng, float* dx, float* dw_router, float* dw_gate_up, float* dw_down,
              const float* dy, const A* x, const float* w_router, const A* w_gate_up, const A* w_down,
              const Shape& s, const Routing& r, const Buffers<A>& b, const BackwardWork<A>& w,
              const RouterLossGrad& losses) {
  combine_backward<A>(w.dlogits, w.dyp, dy, b.yp, s, r, losses);
  experts_backward<A>(eng, ExpertRows{s.E, r.first, r.count}, w.dyp, w.dxp, w.dhidden, w.dgate_up, b.xp, b.gate_up,
                      b.hidden, w_gate_up, w_down, dw_gate_up, dw_down, s.C, s.F);
  router_backward<A>(eng, dx, dw_router, w.dlogits, x, b.x32, w_router, w.dxp, s, r);
}

#define LOOM_MOE(A)                                                                                                 \
  template void forward<A>(Backend&, float*, const A*, const float*, const float*, const A*, const A*, \
                           const Shape&, const Routing&, const Buffers<A>&);                                               \
  template void backward<A>(Backend&, float*, float*, float*, float*, const float*, const A*,          \
                            const float*, const A*, const A*, const Shape&, const Routing&, const Buffers<A>&,      \
                            const BackwardWork<A>&, const RouterLossGrad&);                                      \
  template void route_tokens<A>(Backend&, A*, const A*, const float*, const float*, const Shape&,      \
                                const Routing&, const Buffers<A>&);                                                   \
  template void experts_forward<A>(Backend&, const ExpertRows&, A*, A*, A*, float*, const A*, const A*, \
                                   int, int);                                                                         \
  template void combine_backward<A>(float*, A*, const float*, const float*, const Shape&, const Routing&,            \
                                    const RouterLossGrad&);                                                           \
  template void experts_backward<A>(Backend&, const ExpertRows&, A*, float*, float*, A*, const A*,     \
                                    const A*, const A*, const A*, const A*, float*, float*, int, int);               \
  template void router_backward<A>(Backend&, float*, float*, const float*, const A*, float*,           \
                                   const float*, const float*, const Shape&, const Routing&, bool);
LOOM_MOE(float)
LOOM_MOE(bf16)
LOOM_MOE(f16)
#undef LOOM_MOE

}  // namespace loom::moe
