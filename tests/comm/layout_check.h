// Helpers of the multi-rank layout tests: the world's contexts, and
// comparing a layout's first-step gradients with the single-process run's
// per global tensor (DESIGN.md invariant 1: each stage's chunks, each tp
// rank's slices of each tensor, summed over the tp group where split) and
// its losses.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/progress_engine.h"
#include "config/run_config.h"
#include "model/param_layout.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"
#include "train/trainer.h"

namespace loom::test {

inline int world_size() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

// The whole world as dp x tp x pp (dp inferred), made once per (tp, pp).
inline const ParallelContext& world_context(int tp, int pp) {
  static std::map<std::pair<int, int>, std::unique_ptr<ParallelContext>> contexts;
  auto& ctx = contexts[{tp, pp}];
  if (!ctx) ctx = ParallelContext::create_mpi(ParallelGrid::for_world(world_size(), 0, tp, pp), MpiOptions{120});
  return *ctx;
}

// One layout of a layout-invariance test (the data-parallel size is what
// the world leaves), named for gtest: "tp2_pp1_cp1_1f1b_v1_sp_zero1_fp32".
struct LayoutCase {
  int tp, pp, cp;
  const char* schedule;
  int v;
  bool sequence_parallel;
  int zero;
  const char* precision;
};

inline std::string layout_case_name(const testing::TestParamInfo<LayoutCase>& info) {
  const LayoutCase& l = info.param;
  std::string schedule = l.schedule;
  for (char& ch : schedule)
    if (ch == '-') ch = '_';
  return "tp" + std::to_string(l.tp) + "_pp" + std::to_string(l.pp) + "_cp" + std::to_string(l.cp) + "_" + schedule +
         "_v" + std::to_string(l.v) + (l.sequence_parallel ? "_sp" : "") + "_zero" + std::to_string(l.zero) + "_" +
         l.precision;
}

// Why this world cannot run `l` with a global batch of `batch` split into
// two micro-batches per replica ("" if it can), and its dp.
inline std::string layout_case_skip(const LayoutCase& l, int batch, int* dp) {
  const int world = world_size();
  if (world % (l.tp * l.pp * l.cp) != 0) return "tp x pp x cp does not divide " + std::to_string(world);
  *dp = world / (l.tp * l.pp * l.cp);
  if (batch % (*dp * 2) != 0) return "the batch does not split";
  if (l.zero > 0 && *dp == 1) return "ZeRO needs dp > 1";
  return "";
}

// A progress engine for the layout contexts (as `loom train` runs with
// one); world_context's operations are completed by their callers, so the
// suite runs both paths. nullptr where MPI gives no MPI_THREAD_MULTIPLE.
inline ProgressEngine* test_progress_engine() {
  static const std::unique_ptr<ProgressEngine> engine = [] {
    int provided = 0;
    MPI_Query_thread(&provided);
    return provided >= MPI_THREAD_MULTIPLE ? std::make_unique<ProgressEngine>(ProgressEngine::Options{20}) : nullptr;
  }();
  return engine.get();
}

// The whole world as dp x cp x tp x pp for (tp, pp, cp), "tp-dp-pp" order,
// its experts over ep ranks of the data group, made once per shape (every
// rank runs the tests in the same order); its non-blocking operations
// completed by the progress engine.
inline const ParallelContext& layout_context(int tp, int pp, int cp, int ep = 1) {
  static std::map<std::tuple<int, int, int, int>, std::unique_ptr<ParallelContext>> contexts;
  auto& ctx = contexts[{tp, pp, cp, ep}];
  if (!ctx)
    ctx = ParallelContext::create_mpi(ParallelGrid::for_world(world_size(), 0, tp, pp, "tp-dp-pp", cp, ep),
                                      MpiOptions{120, test_progress_engine()});
  return *ctx;
}

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

// A layout's train and validation losses against the single-process run's,
// each within rtol.
inline void expect_same_losses(const TrainResult& got, const TrainResult& want, double rtol = 1e-4) {
  ASSERT_EQ(got.train_losses.size(), want.train_losses.size());
  for (size_t i = 0; i < want.train_losses.size(); i++)
    EXPECT_NEAR(got.train_losses[i], want.train_losses[i], rtol * std::abs(want.train_losses[i])) << "step " << i;
  ASSERT_EQ(got.val_losses.size(), want.val_losses.size());
  for (size_t i = 0; i < want.val_losses.size(); i++)
    EXPECT_NEAR(got.val_losses[i], want.val_losses[i], rtol * std::abs(want.val_losses[i])) << "eval " << i;
}

}  // namespace loom::test
