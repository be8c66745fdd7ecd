// Data parallelism over the whole world reproduces the single-process run
// (DESIGN.md invariant 1; the full matrix with ZeRO and accumulation is
// issue 5's): the per-step loss within rtol 1e-4 over 10 steps.
#include <gtest/gtest.h>

#include <cmath>

#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "fault/fault_plan.h"
#include "train/trainer.h"

TEST(DataParallel, ReproducesTheSingleProcessLosses) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto cfg = loom::load_run_config(LOOM_SOURCE_DIR "/configs/tiny.toml",
                                   {"train.batch_size=24", "train.steps=10", "train.eval_every=5", "runtime.threads=1",
                                    "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
  auto single = loom::train(cfg, *loom::ParallelContext::create_single(), nullptr);
  auto grid = loom::ParallelGrid::for_world(world, 0, 1, 1);
  auto ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{120});
  auto parallel = loom::train(cfg, *ctx, nullptr);
  ASSERT_EQ(single.train_losses.size(), parallel.train_losses.size());
  for (size_t i = 0; i < single.train_losses.size(); i++)
    EXPECT_NEAR(parallel.train_losses[i], single.train_losses[i], 1e-4 * std::abs(single.train_losses[i])) << "step " << i;
  ASSERT_EQ(single.val_losses.size(), parallel.val_losses.size());
  for (size_t i = 0; i < single.val_losses.size(); i++)
    EXPECT_NEAR(parallel.val_losses[i], single.val_losses[i], 1e-4 * std::abs(single.val_losses[i]));
}

// A rank that computes 150 ms longer every step (an injected straggler): the
// others wait for it after backward, and the run tells that wait apart from
// the reduction's own tail (the least wait over the ranks, per step).
TEST(DataParallel, TellsTheReductionsTailFromWaitingForASlowerRank) {
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  auto cfg = loom::load_run_config(LOOM_SOURCE_DIR "/configs/tiny.toml",
                                   {"train.batch_size=" + std::to_string(2 * world), "train.steps=5",
                                    "train.eval_every=0", "runtime.threads=1",
                                    "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
  loom::TrainOptions options;
  const int slow = world - 1;
  options.faults = loom::FaultPlan({loom::Fault{loom::FaultKind::slow, slow, 1, 150}});
  auto ctx = loom::ParallelContext::create_mpi(loom::ParallelGrid::for_world(world, 0, 1, 1), loom::MpiOptions{120});
  const loom::TrainResult r = loom::train(cfg, *ctx, nullptr, options);
  EXPECT_GT(r.reduce_tail_ms, 0.0) << "some wait on every rank: the last bucket's own reduction";
  EXPECT_LE(r.reduce_tail_ms, r.reduce_wait_ms + 1e-3) << "the tail is the least wait over the ranks";
  EXPECT_LT(r.reduce_tail_ms, 50.0) << "the slower rank's own wait is short";
  if (rank != slow) EXPECT_GT(r.reduce_wait_ms, 100.0) << "rank " << rank << " waited for rank " << slow;
}
