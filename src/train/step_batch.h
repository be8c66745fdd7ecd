// The tokens of one step on this rank: every micro-batch of its rows, one
// after another, with the test probes' masks and document positions applied.
#pragma once

#include <cstdint>
#include <vector>

#include "data/token_source.h"
#include "train/run_shape.h"
#include "train/train_options.h"

namespace loom {

class StepBatch {
 public:
  StepBatch(const RunShape& shape, bool packs, const TrainProbes& probes);

  // The batch of data step `data_step` (the global batch is a function of
  // (seed, data step) alone: any dp size trains on the same data).
  void read(TokenSource& data, uint64_t seed, int64_t data_step);

  std::vector<int32_t> tokens, targets;
  std::vector<int32_t> positions;  // packed rows: each token's position in its document (else empty)

 private:
  const RunShape& shape_;
  const TrainProbes& probes_;
};

}  // namespace loom
