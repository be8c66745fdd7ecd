// Reference softmax + cross-entropy: plain loops (the spec for
// kernels/cpu/softmax_xent). A target < 0 is ignored: loss 0, gradient 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace loom::ref {

// losses[N] = log(sum_v exp(logits[n,v])) - logits[n, targets[n]]; logits[N,V], targets[N]
template <class T>
void softmax_xent_forward(T* losses, const T* logits, const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; n++) {
    const T* x = logits + size_t(n) * V;
    if (targets[n] < 0) {
      losses[n] = 0;
      continue;
    }
    T mx = x[0];  // subtract the max so exp cannot overflow
    for (int v = 1; v < V; v++) mx = std::max(mx, x[v]);
    T sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(x[v] - mx);
    losses[n] = std::log(sum) - (x[targets[n]] - mx);
  }
}

// losses[N] as above; logits[N,V] overwritten by dloss * (softmax(logits[n,:]) - onehot(targets[n])),
// the gradient of dloss * sum_n losses[n] (a zero row where targets[n] < 0).
template <class T>
void softmax_xent_fused(T* losses, T* logits, const int32_t* targets, T dloss, int N, int V) {
  softmax_xent_forward(losses, logits, targets, N, V);
  for (int n = 0; n < N; n++) {
    T* x = logits + size_t(n) * V;
    const int t = targets[n];
    if (t < 0) {
      for (int v = 0; v < V; v++) x[v] = 0;
      continue;
    }
    T mx = x[0];
    for (int v = 1; v < V; v++) mx = std::max(mx, x[v]);
    T sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(x[v] - mx);
    for (int v = 0; v < V; v++) x[v] = dloss * (std::exp(x[v] - mx) / sum - (v == t ? T(1) : T(0)));
  }
}

}  // namespace loom::ref
