#include "train/evaluation.h"

#include <cmath>
#include <vector>

#include "comm/rank_sum.h"

namespace loom {

float evaluate(Replica& replica, const TokenSource& data, int batches, const RunShape& shape,
               const ParallelContext& ctx) {
  const int micro = shape.micro, T = shape.T;
  std::vector<int32_t> tokens(size_t(micro) * T), targets(tokens.size());
  std::vector<int32_t> positions(data.packs() ? tokens.size() : 0);  // packed rows
  int32_t* const pos = positions.empty() ? nullptr : positions.data();
  double sum = 0, count = 0;
  for (int first = shape.rows.begin; first < shape.rows.end; first += micro) {
    ValidationIterator it(data, shape.B, T, RowRange{first, first + micro});
    for (int i = 0; i < batches; i++) {
      it.next(tokens.data(), targets.data(), pos);
      const Replica::LossSum part = replica.evaluate(tokens.data(), targets.data(), T, pos);
      sum += part.sum, count += double(part.targets);
    }
  }
  sum = sum_over_ranks(ctx.dp(), sum), count = sum_over_ranks(ctx.dp(), count);
  return count > 0 ? float(sum / count) : NAN;
}

}  // namespace loom
