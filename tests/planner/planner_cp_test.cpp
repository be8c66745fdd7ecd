// The planner and context parallelism (issue 21): cp in the search, its
// memory (a rank's share of each sequence, the ring's blocks) and its ring
// transfers modelled; at long sequences it proposes cp, and what it
// proposes is a layout loom train accepts. The engine's own prediction
// (predict_loom_run) reads the modules' activation plan at seq_len / cp.
#include <gtest/gtest.h>

#include <omp.h>

#include "config/run_config.h"
#include "model/stage_module.h"
#include "parallel/grid/parallel_grid.h"
#include "planner/cluster.h"
#include "planner/memory_model.h"
#include "planner/model_presets.h"
#include "planner/predict.h"
#include "planner/search.h"
#include "planner/time_model.h"
#include "roomy_cluster.h"
#include "train/trainer.h"

namespace loom::planner {
namespace {

TEST(PlannerContextParallel, SplitsActivationsAndCountsTheRing) {
  const Workload w{model_preset("gpt3-6.7b").model, 64};
  Workload long_w = w;
  long_w.model.seq_len = 32768;
  const ClusterSpec c = with_devices(load_cluster("a100-80gb", LOOM_SOURCE_DIR), 64);
  Layout one;
  one.dp = 64, one.micro_batch = 1, one.micro_batches = 1, one.zero = 3;
  Layout two = one;
  two.dp = 32, two.cp = 2, two.micro_batches = 2;  // the same 64 sequences per step
  const MemoryBreakdown a = peak_memory(long_w, one, c), b = peak_memory(long_w, two, c);
  EXPECT_NEAR(b.activations / a.activations, 0.5, 0.01);  // each rank holds half of every sequence
  EXPECT_GT(b.comm_buffers, a.comm_buffers);             // the ring's key/value and gradient blocks
  EXPECT_DOUBLE_EQ(b.optimizer, a.optimizer);            // ZeRO shards over dp x cp = 64 either way
  const StepTime ta = step_time(long_w, one, c), tb = step_time(long_w, two, c);
  EXPECT_EQ(ta.cp_comm, 0);
  EXPECT_GT(tb.cp_comm, 0);
  EXPECT_GT(tb.step, ta.step);  // the same compute per rank, plus what the ring does not hide
}

TEST(PlannerContextParallel, ProposesCpForLongSequencesAndLoomRunsIt) {
  Workload w{model_preset("gpt3-6.7b").model, 64};
  w.model.seq_len = 32768;
  const ClusterSpec c = with_devices(load_cluster("a100-80gb", LOOM_SOURCE_DIR), 64);
  const SearchResult any = search_layouts(w, c, SearchSpace{}, 3);
  ASSERT_FALSE(any.top.empty());
  const Layout best = any.top[0].layout;
  EXPECT_GT(best.cp, 1) << best.describe();
  SearchSpace no_cp;
  no_cp.cp = {1};
  const SearchResult without = search_layouts(w, c, no_cp, 1);
  if (!without.top.empty()) {
    EXPECT_LT(any.top[0].time.step, without.top[0].time.step);
  }
  // What it proposes passes the trainer's checks (config and layout).
  RunConfig cfg;
  cfg.model = w.model;
  cfg = with_layout(cfg, best);
  cfg.validate();
  EXPECT_EQ(cfg.parallel.cp, best.cp);
  check_layout(cfg, ParallelGrid::for_world(best.devices(), cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp,
                                            cfg.parallel.order, cfg.parallel.cp));
  EXPECT_EQ(layout_of(cfg, best.devices()).cp, best.cp);
  // Short sequences: the ring only costs, so data parallelism wins.
  Workload short_w{model_preset("gpt2-124m").model, 64};
  const SearchResult small = search_layouts(short_w, with_devices(c, 8), SearchSpace{}, 1);
  ASSERT_FALSE(small.top.empty());
  EXPECT_EQ(small.top[0].layout.cp, 1);
}

TEST(PlannerContextParallel, TheEnginePredictionReadsTheLocalPlan) {
  RunConfig cfg;
  cfg.model = ModelConfig{512, 2, 4, 64, 256};
  cfg.model.attention = AttentionKind::tiled;
  cfg.train.batch_size = 2, cfg.train.micro_batch_size = 1;
  cfg.runtime.threads = omp_get_max_threads();
  const ClusterSpec cluster = roomy_cluster(3);
  const RunPrediction one = predict_loom_run(cfg, 2, cluster);
  cfg.parallel.cp = 2;
  const RunPrediction two = predict_loom_run(cfg, 2, cluster);
  EXPECT_EQ(two.activation_bytes, double(planned_activation_bytes(cfg.model, ModelShard{}, 1, 128, 1,
                                                                  ComputePrecision::fp32, Recompute::none,
                                                                  omp_get_max_threads(), 2)));
  EXPECT_LT(two.activation_bytes, one.activation_bytes);
  cfg.parallel.cp = 3;  // 256 tokens are not 6 equal chunks
  EXPECT_THROW(predict_loom_run(cfg, 3, cluster), UserError);
}

}  // namespace
}  // namespace loom::planner
