// Comparing a layout's first-step gradients with the single-process run's,
// per global tensor (DESIGN.md invariant 1): each stage's chunks, each tp
// rank's slices of each tensor, summed over the tp group where split.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "model/param_layout.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"

namespace loom::test {

// Relative Frobenius distance between this stage's first-step gradients
// (`got`, the stage buffer) and the single-process ones (`want`, the whole
// model's buffer), per global tensor name.
inline std::map<std::string, double> gradient_errors(const RunConfig& cfg, const ParallelContext& ctx,
                                                     const std::vector<float>& got, const std::vector<float>& want) {
  std::map<std::string, double> out;
  const auto whole = ParamLayout::for_model(cfg.model);
  const auto shards = stage_shards(cfg, ctx, plan_pipeline(cfg, ctx.grid().pp()));
  const auto offsets = chunk_offsets(cfg.model, shards);
  for (size_t c = 0; c < shards.size(); c++) {
    const auto local = ParamLayout::for_model(cfg.model, shards[c]);
    for (size_t i = 0; i < local.params.size(); i++) {
      const auto& p = local.params[i];
      const auto& g = *whole.find(p.name);
      const int64_t gcols = g.shape.size() > 1 ? g.shape[1] : 1;
      float sums[2] = {0, 0};  // squared difference, squared reference
      for (const auto& piece : local.pieces(int(i))) {
        const int64_t rows = piece.shape[0], cols = piece.shape.size() > 1 ? piece.shape[1] : 1;
        const int64_t col0 = piece.shape.size() > 1 ? piece.global_offset[1] : 0;
        for (int64_t r = 0; r < rows; r++)
          for (int64_t k = 0; k < cols; k++) {
            double a = got[size_t(offsets[c] + p.offset + piece.local_offset + r * cols + k)];
            double b = want[size_t(g.offset + (piece.global_offset[0] + r) * gcols + col0 + k)];
            sums[0] += float((a - b) * (a - b)), sums[1] += float(b * b);
          }
      }
      if (p.split.dim >= 0) ctx.tp().all_reduce(sums, 2, DType::f32, ReduceOp::Sum);
      out[p.name] = std::sqrt(double(sums[0])) / std::max(1e-30, std::sqrt(double(sums[1])));
    }
  }
  return out;
}

}  // namespace loom::test
