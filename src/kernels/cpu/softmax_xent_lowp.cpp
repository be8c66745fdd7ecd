// Cross-entropy on 16-bit logits (see softmax_xent.h): the fp32 kernels'
// arithmetic, widening each logit as it is read and rounding the gradient
// once as it is written. exp() cannot be stored in the 16-bit row between
// the sweeps (it would be rounded twice): the fused kernel keeps a row's
// exp() in fp32 on the thread's stack (up to kStoredRow columns: GPT-2's
// 50k, 196 KiB, which stays in L2), and recomputes it where the row is
// longer and in xent_finish (its sums come from another call).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/softmax_xent.h"

namespace loom::cpu {

namespace {

inline float widen(bf16 x) { return bf16_to_float(x); }
inline float widen(f16 x) { return _cvtsh_ss(x.bits); }  // F16C, exact
inline void narrow(bf16* out, float x) { *out = float_to_bf16(x); }
inline void narrow(f16* out, float x) { out->bits = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT); }  // ties to even

void check_targets(const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; n++)
    LOOM_CHECK(targets[n] < V, "target %d at row %d is outside the vocabulary (%d)", targets[n], n, V);
}

template <class L>
float row_max(const L* x, int V) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; v++) {
    const float xv = widen(x[v]);
    mx = xv > mx ? xv : mx;
  }
  return mx;
}

// Sum of exp(x - mx) over the row, in double as in the fp32 kernels.
template <class L>
double exp_sum(const L* x, float mx, int V) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) sum += expf(widen(x[v]) - mx);
  return sum;
}

// x[v] = round(exp(x[v] - mx) * scale) for v < valid, 0 after (up to Vl).
template <class L>
void write_grad(L* x, float mx, float scale, int valid, int Vl) {
#pragma omp simd
  for (int v = 0; v < valid; v++) narrow(&x[v], expf(widen(x[v]) - mx) * scale);
  for (int v = valid; v < Vl; v++) narrow(&x[v], 0.f);
}

template <class L>
void forward_impl(float* losses, const L* logits, const int32_t* targets, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const L* x = logits + size_t(n) * V;  // [V]
    const int t = targets[n];
    if (t < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float mx = row_max(x, V);
    losses[n] = float(std::log(exp_sum(x, mx, V)) - double(widen(x[t]) - mx));
  }
}

// Columns of a row whose exp() the fused kernel keeps (256 KiB of stack).
constexpr int kStoredRow = 1 << 16;

// One row of the fused kernel: sum of exp(x - mx) in double, and, with
// `stored`, each exp kept there for the last sweep.
template <class L>
double exp_sum_stored(const L* x, float* stored, float mx, int V) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) {
    const float e = expf(widen(x[v]) - mx);
    stored[v] = e;
    sum += e;
  }
  return sum;
}

template <class L>
void scale_stored(L* x, const float* stored, float scale, int V) {
#pragma omp simd
  for (int v = 0; v < V; v++) narrow(&x[v], stored[v] * scale);
}

template <class L>
void fused_row(float* loss, L* x, float* stored, int t, float dloss, int V) {
  if (t < 0) {
    *loss = 0.0f;
    write_grad(x, 0.f, 0.f, 0, V);
    return;
  }
  const float mx = row_max(x, V);
  const float xt = widen(x[t]) - mx;
  const double sum = stored ? exp_sum_stored(x, stored, mx, V) : exp_sum(x, mx, V);
  *loss = float(std::log(sum) - double(xt));
  // The target's entry is written from its fp32 value, as in the fp32
  // kernel (softmax - dloss, rounded once).
  const float scale = float(double(dloss) / sum);
  const float target_grad = expf(xt) * scale - dloss;
  if (stored) scale_stored(x, stored, scale, V);
  else write_grad(x, mx, scale, V, V);
  narrow(&x[t], target_grad);
}

template <class L>
void fused_impl(float* losses, L* logits, const int32_t* targets, float dloss, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel
  {
    alignas(64) float stored[kStoredRow];
    float* const keep = V <= kStoredRow ? stored : nullptr;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) fused_row(losses + n, logits + size_t(n) * V, keep, targets[n], dloss, V);
  }
}

}  // namespace

void softmax_xent_forward(float* losses, const bf16* logits, const int32_t* targets, int N, int V) {
  forward_impl(losses, logits, targets, N, V);
}
void softmax_xent_forward(float* losses, const f16* logits, const int32_t* targets, int N, int V) {
  forward_impl(losses, logits, targets, N, V);
}
void softmax_xent_fused(float* losses, bf16* logits, const int32_t* targets, float dloss, int N, int V) {
  fused_impl(losses, logits, targets, dloss, N, V);
}
void softmax_xent_fused(float* losses, f16* logits, const int32_t* targets, float dloss, int N, int V) {
  fused_impl(losses, logits, targets, dloss, N, V);
}

template <class L>
void xent_partial_max(float* row_max_out, const L* logits, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) row_max_out[n] = row_max(logits + size_t(n) * Vl, valid);
}

template <class L>
void xent_partial_sums(float* sums, const L* logits, const float* row_max, const int32_t* targets,
                       int64_t vocab_begin, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const L* x = logits + size_t(n) * Vl;  // [Vl]
    const float mx = row_max[n];
    const int64_t t = int64_t(targets[n]) - vocab_begin;
    sums[2 * n] = float(exp_sum(x, mx, valid));
    sums[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < valid ? widen(x[t]) - mx : 0.f;
  }
}

template <class L>
void xent_finish(float* losses, L* logits, const float* row_max, const float* sums, const int32_t* targets,
                 int64_t vocab_begin, float dloss, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    L* x = logits + size_t(n) * Vl;  // [Vl], logits in, gradient out
    if (targets[n] < 0) {
      losses[n] = 0.f;
      write_grad(x, 0.f, 0.f, 0, Vl);
      continue;
    }
    const float mx = row_max[n];
    const double sum = sums[2 * n];
    losses[n] = float(std::log(sum) - double(sums[2 * n + 1]));
    const float scale = float(double(dloss) / sum);
    const int64_t t = int64_t(targets[n]) - vocab_begin;
    const float target_grad = t >= 0 && t < valid ? expf(widen(x[t]) - mx) * scale - dloss : 0.f;
    write_grad(x, mx, scale, valid, Vl);
    if (t >= 0 && t < valid) narrow(&x[t], target_grad);
  }
}

#define LOOM_XENT_INSTANCES(L)                                                                                  \
  template void xent_partial_max<L>(float*, const L*, int, int, int);                                          \
  template void xent_partial_sums<L>(float*, const L*, const float*, const int32_t*, int64_t, int, int, int);  \
  template void xent_finish<L>(float*, L*, const float*, const float*, const int32_t*, int64_t, float, int, int, \
                               int);
LOOM_XENT_INSTANCES(bf16)
LOOM_XENT_INSTANCES(f16)
#undef LOOM_XENT_INSTANCES

}  // namespace loom::cpu
