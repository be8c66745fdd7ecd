#include "train/step_batch.h"

namespace loom {

StepBatch::StepBatch(const RunShape& shape, bool packs, const TrainProbes& probes)
    : tokens(size_t(shape.accumulation) * shape.micro * shape.T),
      targets(tokens.size()),
      positions(packs || probes.document_position ? tokens.size() : 0),
      shape_(shape),
      probes_(probes) {}

void StepBatch::read(TokenSource& data, uint64_t seed, int64_t data_step) {
  const int micro = shape_.micro, T = shape_.T;
  for (int k = 0; k < shape_.accumulation; k++) {
    const RowRange rows{shape_.rows.begin + k * micro, shape_.rows.begin + (k + 1) * micro};
    const size_t at = size_t(k) * micro * T;
    data.train_batch(seed, data_step, shape_.B, T, rows, tokens.data() + at, targets.data() + at,
                     positions.empty() ? nullptr : positions.data() + at);
    // [micro, T] from `at`: row r of the micro-batch is global row rows.begin + r.
    for (int r = 0; r < micro; r++)
      for (int t = 0; t < T; t++) {
        const size_t i = at + size_t(r) * T + size_t(t);
        if (probes_.target_mask && probes_.target_mask(data_step, rows.begin + r, t)) targets[i] = -1;
        if (probes_.document_position) positions[i] = probes_.document_position(data_step, rows.begin + r, t);
      }
  }
}

}  // namespace loom
