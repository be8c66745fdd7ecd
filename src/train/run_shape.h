// How one rank's share of the global batch is cut: its rows, read in
// micro-batches whose gradients accumulate.
#pragma once

#include "data/token_source.h"

namespace loom {

struct RunShape {
  int B = 0, T = 0;      // global batch rows x sequence length
  RowRange rows;         // this replica's rows of the global batch
  int micro = 0;         // rows per micro-batch
  int accumulation = 0;  // micro-batches per step
  int threads = 0;       // OpenMP threads per rank

  double tokens_per_step() const { return double(B) * T; }
};

}  // namespace loom
