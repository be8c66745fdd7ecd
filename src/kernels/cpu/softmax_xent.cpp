#include "kernels/cpu/softmax_xent.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/simd_math.h"

namespace loom::cpu {

namespace {

void check_targets(const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; n++)
    LOOM_CHECK(targets[n] < V, "target %d at row %d is outside the vocabulary (%d)", targets[n], n, V);
}

float row_max(const float* x, int V) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
  return mx;
}

}  // namespace

// The exp sums are accumulated in double: a vocabulary row is ~50k terms.
void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + size_t(n) * V;  // [V]
    const int t = targets[n];
    if (t < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float mx = row_max(x, V);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += expf(x[v] - mx);
    losses[n] = float(std::log(sum) - double(x[t] - mx));
  }
}

// Three sweeps per row: max (from memory), exp stored in place with the sum,
// then the scale. A 50k-float row (200 KB) stays in L2 after the first sweep.
void softmax_xent_fused(float* losses, float* logits, const int32_t* targets, float dloss, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + size_t(n) * V;  // [V], logits in, gradient out
    const int t = targets[n];
    if (t < 0) {
      losses[n] = 0.0f;
#pragma omp simd
      for (int v = 0; v < V; v++) x[v] = 0.0f;
      continue;
    }
    const float mx = row_max(x, V);
    const float xt = x[t] - mx;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) {
      const float e = expf(x[v] - mx);
      x[v] = e;
      sum += e;
    }
    losses[n] = float(std::log(sum) - double(xt));
    const float scale = float(double(dloss) / sum);
#pragma omp simd
    for (int v = 0; v < V; v++) x[v] *= scale;
    x[t] -= dloss;
  }
}

}  // namespace loom::cpu

namespace loom::cpu {

void xent_partial_max(float* row_max_out, const float* logits, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) row_max_out[n] = row_max(logits + size_t(n) * Vl, valid);
}

void xent_partial_sums(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                       int64_t vocab_begin, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + size_t(n) * Vl;  // [Vl]
    const float mx = row_max[n];
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < valid; v++) sum += expf(x[v] - mx);
    const int64_t t = int64_t(targets[n]) - vocab_begin;
    sums[2 * n] = float(sum);
    sums[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < valid ? x[t] - mx : 0.f;
  }
}

void xent_finish(float* losses, float* logits, const float* row_max, const float* sums, const int32_t* targets,
                 int64_t vocab_begin, float dloss, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + size_t(n) * Vl;  // [Vl], logits in, gradient out
    if (targets[n] < 0) {
      losses[n] = 0.f;
      std::fill(x, x + Vl, 0.f);
      continue;
    }
    const float mx = row_max[n];
    const double sum = sums[2 * n];
    losses[n] = float(std::log(sum) - double(sums[2 * n + 1]));
    const float scale = float(double(dloss) / sum);
#pragma omp simd
    for (int v = 0; v < valid; v++) x[v] = expf(x[v] - mx) * scale;
    std::fill(x + valid, x + Vl, 0.f);
    const int64_t t = int64_t(targets[n]) - vocab_begin;
    if (t >= 0 && t < valid) x[t] -= dloss;
  }
}

}  // namespace loom::cpu
