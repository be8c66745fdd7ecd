// Context parallelism's split of a sequence: T tokens cut into 2 cp chunks
// of T / (2 cp); rank r of the cp group holds chunks r and 2 cp - 1 - r, in
// that order, as its T / cp local rows. Under the causal mask chunk i has
// i + 1/2 chunks of keys to attend to, so each rank's pair has 2 cp of them:
// the work is balanced (Megatron-core's and torchtitan's load balancing).
// A value type: no communication.
#pragma once

#include <cstdint>

#include "core/check.h"

namespace loom {

struct SequenceSplit {
  int cp = 1, rank = 0;

  bool active() const { return cp > 1; }
  int local_len(int T) const { return T / cp; }
  // The global chunk of local half h (0 or 1).
  int chunk(int half) const { return half == 0 ? rank : 2 * cp - 1 - rank; }
  // Global position of local row t of a local sequence of Tl rows.
  int position(int t, int Tl) const {
    const int Tc = Tl / 2;
    return cp == 1 ? t : chunk(t / Tc) * Tc + t % Tc;
  }
  // Copies this rank's rows of each of B sequences of T tokens in `full`
  // into `local` [B, T / cp].
  template <class X>
  void take(X* local, const X* full, int B, int T) const {
    const int Tl = local_len(T);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++) local[int64_t(b) * Tl + t] = full[int64_t(b) * T + position(t, Tl)];
  }
};

}  // namespace loom
