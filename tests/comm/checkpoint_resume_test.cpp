// Checkpoints in the training loop (issue 9), under mpirun at every world
// size (dp = world; at 8 ranks the 3D layout dp x tp x pp = 2 x 2 x 2):
//   - stopping after 10 of 20 steps and resuming (--resume auto) gives the
//     same losses, bit for bit, as never stopping (DESIGN.md invariant 2);
//   - at 8 ranks, resharding 2x2x2 -> 1x1x1 (rank 0 alone) -> 4x1x2
//     continues with losses within rtol 1e-4 of the uninterrupted run;
//   - three bad batches in a row roll back to the last checkpoint and skip
//     that data window, and training goes on.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

int world_size() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

struct Layout {
  int tp, pp;
};

Layout world_layout() { return world_size() == 8 ? Layout{2, 2} : Layout{1, 1}; }

// The global batch of 16 splits into dp x micro-batches of 2.
bool batch_splits() {
  const Layout l = world_layout();
  return 16 % (world_size() / (l.tp * l.pp) * 2) == 0;
}

loom::RunConfig tiny(const Layout& l, const std::string& checkpoint_dir, int every,
                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.n_layer=4", "model.n_head=4", "train.batch_size=16", "train.micro_batch_size=2", "train.steps=20",
       "train.eval_every=0", "runtime.threads=1", "parallel.zero=1", "parallel.tp=" + std::to_string(l.tp),
       "parallel.pp=" + std::to_string(l.pp), std::string("parallel.sequence_parallel=") + (l.tp > 1 ? "true" : "false"),
       "train.checkpoint_every=" + std::to_string(every), "train.checkpoint_dir=\"" + checkpoint_dir + "\"",
       "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loom::load_run_config(LOOM_SOURCE_DIR "/configs/tiny.toml", sets);
}

const loom::ParallelContext& context(const Layout& l) {
  static std::unique_ptr<loom::ParallelContext> ctx[2];
  auto& c = ctx[l.tp > 1 ? 1 : 0];
  if (!c)
    c = loom::ParallelContext::create_mpi(loom::ParallelGrid::for_world(world_size(), 0, l.tp, l.pp),
                                          loom::MpiOptions{120});
  return *c;
}

// A fresh folder every rank agrees on.
std::string fresh_dir(const std::string& name) {
  std::string dir = "/tmp/loom_ckpt_test_" + std::to_string(world_size()) + "_" + name;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) loom::remove_tree(dir), ::mkdir(dir.c_str(), 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

const loom::TrainResult& uninterrupted() {
  static const loom::TrainResult r =
      loom::train(tiny(world_layout(), fresh_dir("straight"), 0), context(world_layout()), nullptr);
  return r;
}

TEST(CheckpointResume, StopAndResumeIsBitwiseIdentical) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  const Layout l = world_layout();
  const std::string dir = fresh_dir("stop");
  loom::TrainOptions stop;
  stop.stop_after = 10;
  const loom::TrainResult first = loom::train(tiny(l, dir, 10), context(l), nullptr, stop);
  ASSERT_EQ(first.train_losses.size(), 10u);
  loom::TrainOptions resume;
  resume.resume = "auto";
  const loom::TrainResult second = loom::train(tiny(l, dir, 10), context(l), nullptr, resume);
  const auto& want = uninterrupted().train_losses;
  ASSERT_EQ(second.train_losses.size(), 10u);
  EXPECT_EQ(0, std::memcmp(first.train_losses.data(), want.data(), 10 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(second.train_losses.data(), want.data() + 10, 10 * sizeof(float)))
      << "step 11 resumed " << second.train_losses[0] << " vs " << want[10];
}

// fp16 with dynamic loss scaling: an overflow at step 3 halves the scale
// (hysteresis 1), and it doubles again only after 8 clean steps, so at the
// checkpoint (step 10) the scale is 32768, not the initial 65536, with 6
// clean steps counted; resuming restores both, and the run goes on bit for
// bit, loss scales included (the regrowth at step 12 lands on the same step).
TEST(CheckpointResume, LossScalerStateIsPartOfTheCheckpoint) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  const Layout l = world_layout();
  const std::vector<std::string> fp16 = {"precision.compute=\"fp16\"", "precision.hysteresis=1",
                                         "precision.growth_interval=8"};
  loom::TrainOptions inject;
  inject.inf_steps = {3};
  inject.inf_rank = -1;
  const loom::TrainResult want = loom::train(tiny(l, fresh_dir("fp16_straight"), 0, fp16), context(l), nullptr, inject);
  ASSERT_EQ(want.loss_scales.size(), 20u);
  EXPECT_EQ(want.loss_scales[3], 65536.f);
  EXPECT_EQ(want.loss_scales[4], 32768.f);
  EXPECT_EQ(want.loss_scales[11], 32768.f);
  EXPECT_EQ(want.loss_scales[12], 65536.f);  // 8 clean steps (4..11) later
  const std::string dir = fresh_dir("fp16_stop");
  loom::TrainOptions stop = inject;
  stop.stop_after = 10;
  loom::train(tiny(l, dir, 10, fp16), context(l), nullptr, stop);
  loom::TrainOptions resume;
  resume.resume = "auto";
  const loom::TrainResult second = loom::train(tiny(l, dir, 10, fp16), context(l), nullptr, resume);
  ASSERT_EQ(second.train_losses.size(), 10u);
  EXPECT_EQ(0, std::memcmp(second.train_losses.data(), want.train_losses.data() + 10, 10 * sizeof(float)));
  EXPECT_EQ(std::vector<float>(want.loss_scales.begin() + 10, want.loss_scales.end()), second.loss_scales);
}

TEST(CheckpointResume, ReshardingContinuesTheRun) {
  if (world_size() != 8) GTEST_SKIP() << "2x2x2 -> 1x1x1 -> 4x1x2 needs 8 ranks";
  const std::string a = fresh_dir("reshard_a"), b = fresh_dir("reshard_b");
  loom::TrainOptions stop;
  stop.stop_after = 10;
  loom::train(tiny(Layout{2, 2}, a, 10), context(Layout{2, 2}), nullptr, stop);  // 2x2x2, saves step 10
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<float> losses(20, 0.f);
  if (rank == 0) {  // 1x1x1: steps 11..15, saves step 15
    loom::TrainOptions opt;
    opt.resume = a + "/step_000010";
    opt.stop_after = 15;
    auto single = loom::train(tiny(Layout{1, 1}, b, 5), *loom::ParallelContext::create_single(), nullptr, opt);
    ASSERT_EQ(single.train_losses.size(), 5u);
    for (int i = 0; i < 5; i++) losses[size_t(10 + i)] = single.train_losses[size_t(i)];
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // 4x1x2 (dp 4, pp 2): steps 16..20 from the single process's checkpoint.
  static auto ctx = loom::ParallelContext::create_mpi(loom::ParallelGrid::for_world(8, 4, 1, 2),
                                                      loom::MpiOptions{120});
  loom::TrainOptions opt;
  opt.resume = "auto";
  auto last = loom::train(tiny(Layout{1, 2}, b, 0), *ctx, nullptr, opt);
  ASSERT_EQ(last.train_losses.size(), 5u);
  const auto& want = uninterrupted().train_losses;
  for (int i = 0; i < 5; i++)
    EXPECT_NEAR(last.train_losses[size_t(i)], want[size_t(15 + i)], 1e-4 * std::abs(want[size_t(15 + i)]))
        << "step " << 16 + i;
  if (rank == 0)
    for (int i = 10; i < 15; i++)
      EXPECT_NEAR(losses[size_t(i)], want[size_t(i)], 1e-4 * std::abs(want[size_t(i)])) << "step " << i + 1;
}

// ZB-V (issue 20) puts the embedding and the tied head on stage 0: its
// checkpoint holds the table once, and resumes under 1F1B as the run that
// never stopped (pp 2, bit for bit: the split backward adds the same terms
// in the same order).
TEST(CheckpointResume, ZeroBubbleVCheckpointResumesUnderOneFOneB) {
  if (world_size() != 2) GTEST_SKIP() << "pp 2 at 2 ranks";
  static auto ctx = loom::ParallelContext::create_mpi(loom::ParallelGrid::for_world(2, 1, 1, 2), loom::MpiOptions{120});
  const Layout l{1, 2};
  const loom::TrainResult want = loom::train(tiny(l, fresh_dir("zbv_straight"), 0), *ctx, nullptr);
  const std::string dir = fresh_dir("zbv_stop");
  loom::TrainOptions stop;
  stop.stop_after = 10;
  const std::vector<std::string> zbv = {"parallel.schedule=\"zb-v\"", "parallel.virtual_stages=2"};
  const loom::TrainResult first = loom::train(tiny(l, dir, 10, zbv), *ctx, nullptr, stop);
  loom::TrainOptions resume;
  resume.resume = "auto";
  const loom::TrainResult second = loom::train(tiny(l, dir, 10), *ctx, nullptr, resume);
  ASSERT_EQ(first.train_losses.size(), 10u);
  ASSERT_EQ(second.train_losses.size(), 10u);
  EXPECT_EQ(0, std::memcmp(first.train_losses.data(), want.train_losses.data(), 10 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(second.train_losses.data(), want.train_losses.data() + 10, 10 * sizeof(float)))
      << "step 11 resumed " << second.train_losses[0] << " vs " << want.train_losses[10];
}

// Context parallelism (issue 21): a cp = 2 run stopped at step 10 resumes
// under cp = 2 bit for bit, and as dp = 2 (the same data group, sequences
// whole) within rtol 1e-4; ZeRO-0 (the data group's first rank writes the
// replica) and ZeRO-1 (every rank its shard).
TEST(CheckpointResume, ContextParallelStopsResumesAndReshards) {
  if (world_size() != 2) GTEST_SKIP() << "cp 2 at 2 ranks";
  static auto cp_ctx = loom::ParallelContext::create_mpi(loom::ParallelGrid::for_world(2, 1, 1, 1, "tp-dp-pp", 2),
                                                         loom::MpiOptions{120});
  const Layout l{1, 1};
  for (int zero : {0, 1}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    const std::vector<std::string> cp2 = {"parallel.cp=2", "parallel.zero=" + std::to_string(zero)};
    const std::string tag = "cp_z" + std::to_string(zero);
    const loom::TrainResult want = loom::train(tiny(l, fresh_dir(tag + "_straight"), 0, cp2), *cp_ctx, nullptr);
    const std::string dir = fresh_dir(tag + "_stop");
    loom::TrainOptions stop;
    stop.stop_after = 10;
    const loom::TrainResult first = loom::train(tiny(l, dir, 10, cp2), *cp_ctx, nullptr, stop);
    loom::TrainOptions resume;
    resume.resume = "auto";
    const loom::TrainResult second = loom::train(tiny(l, dir, 10, cp2), *cp_ctx, nullptr, resume);
    ASSERT_EQ(first.train_losses.size(), 10u);
    ASSERT_EQ(second.train_losses.size(), 10u);
    EXPECT_EQ(0, std::memcmp(first.train_losses.data(), want.train_losses.data(), 10 * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(second.train_losses.data(), want.train_losses.data() + 10, 10 * sizeof(float)))
        << "step 11 resumed " << second.train_losses[0] << " vs " << want.train_losses[10];
    loom::TrainOptions from_step10;
    from_step10.resume = dir + "/step_000010";  // the cp run's own later checkpoint is `latest` now
    const loom::TrainResult as_dp =
        loom::train(tiny(l, dir, 0, {"parallel.zero=" + std::to_string(zero)}), context(l), nullptr, from_step10);
    ASSERT_EQ(as_dp.train_losses.size(), 10u);
    for (size_t i = 0; i < 10; i++)
      EXPECT_NEAR(as_dp.train_losses[i], want.train_losses[10 + i], 1e-4 * want.train_losses[10 + i]) << "step " << i;
  }
}

// LLaMA (issue 17): stop at step 10 and resume; at 8 ranks the checkpoint of
// the 2x2x2 run (sequence parallel, ZeRO-1) resumes as 4x1x2 (losses within
// rtol 1e-4 of the uninterrupted run), elsewhere in the same layout (bit for
// bit). The untied head and the embedding are separate tensors throughout.
TEST(CheckpointResume, LlamaStopsResumesAndReshards) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  const std::vector<std::string> llama = {"model.family=\"llama\"", "model.n_kv_head=2", "model.ffn_hidden=96"};
  const Layout l = world_layout();
  const loom::TrainResult want = loom::train(tiny(l, fresh_dir("llama_straight"), 0, llama), context(l), nullptr);
  const std::string dir = fresh_dir("llama_stop");
  loom::TrainOptions stop;
  stop.stop_after = 10;
  loom::train(tiny(l, dir, 10, llama), context(l), nullptr, stop);
  loom::TrainOptions resume;
  resume.resume = "auto";
  const bool reshard = world_size() == 8;
  static auto dp4pp2 = loom::ParallelContext::create_mpi(
      loom::ParallelGrid::for_world(world_size(), reshard ? 4 : 0, 1, reshard ? 2 : 1), loom::MpiOptions{120});
  const loom::TrainResult second = reshard ? loom::train(tiny(Layout{1, 2}, dir, 10, llama), *dp4pp2, nullptr, resume)
                                           : loom::train(tiny(l, dir, 10, llama), context(l), nullptr, resume);
  ASSERT_EQ(second.train_losses.size(), 10u);
  for (int i = 0; i < 10; i++) {
    const float w = want.train_losses[size_t(10 + i)];
    if (reshard) EXPECT_NEAR(second.train_losses[size_t(i)], w, 1e-4 * std::abs(w)) << "step " << 11 + i;
    else EXPECT_EQ(second.train_losses[size_t(i)], w) << "step " << 11 + i;
  }
}

// Any ZeRO stage resumes any other's checkpoint (issue 18): resharding. Five
// steps each under ZeRO 0 -> 3 -> 1 -> 2 (fp32), and in bf16 ZeRO 3 -> 1 -> 0
// -> 2 (sharded masters: each rank saves its master shard), every segment
// resuming the previous one's checkpoint; the losses follow the
// uninterrupted run of the same precision within rtol 1e-4.
TEST(CheckpointResume, EveryZeroStageResumesEveryOther) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  if (world_size() > 4) GTEST_SKIP() << "run at 2 and 4 ranks (dp 2, 4); 8 ranks reshard 2x2x2 above";
  const Layout l = world_layout();
  for (const char* precision : {"fp32", "bf16"}) {
    const std::vector<int> stages = std::string(precision) == "fp32" ? std::vector<int>{0, 3, 1, 2}
                                                                     : std::vector<int>{3, 1, 0, 2};
    auto with = [&](int zero) {
      return std::vector<std::string>{"parallel.zero=" + std::to_string(zero),
                                      std::string("precision.compute=\"") + precision + "\""};
    };
    const loom::TrainResult want =
        loom::train(tiny(l, fresh_dir(std::string("zero_straight_") + precision), 0, with(1)), context(l), nullptr);
    const std::string dir = fresh_dir(std::string("zero_chain_") + precision);
    std::vector<float> losses;
    for (size_t k = 0; k < stages.size(); k++) {
      loom::TrainOptions opt;
      opt.stop_after = int(5 * (k + 1));
      if (k > 0) opt.resume = "auto";
      const loom::TrainResult part = loom::train(tiny(l, dir, 5, with(stages[k])), context(l), nullptr, opt);
      ASSERT_EQ(part.train_losses.size(), 5u) << "ZeRO-" << stages[k];
      losses.insert(losses.end(), part.train_losses.begin(), part.train_losses.end());
    }
    ASSERT_EQ(losses.size(), want.train_losses.size());
    for (size_t i = 0; i < losses.size(); i++)
      EXPECT_NEAR(losses[i], want.train_losses[i], 1e-4 * std::abs(want.train_losses[i]))
          << precision << " step " << i + 1 << " under ZeRO-" << stages[i / 5];
  }
}

// train.freeze (issue 35): a frozen group checkpoints its parameters (and
// no optimizer state) beside the trained group's; the run stops and resumes
// bit for bit in its own layout, and resumes under every other ZeRO stage
// (fp32 ZeRO 1 -> 3 -> 0 -> 2: the frozen group sharded under ZeRO-3) with
// losses within rtol 1e-4 of the uninterrupted frozen run.
TEST(CheckpointResume, FrozenTensorsResumeUnderEveryZeroStage) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  if (world_size() > 4) GTEST_SKIP() << "run at 1, 2 and 4 ranks";
  const Layout l = world_layout();
  auto with = [&](int zero) {
    return std::vector<std::string>{"parallel.zero=" + std::to_string(zero),
                                    "train.freeze=[\"wte.weight\", \"h.0.*\", \"h.2.mlp.*\"]"};
  };
  const loom::TrainResult want = loom::train(tiny(l, fresh_dir("frozen_straight"), 0, with(1)), context(l), nullptr);
  const std::string dir = fresh_dir("frozen_chain");
  const std::vector<int> stages = {1, 1, 3, 0};
  std::vector<float> losses;
  for (size_t k = 0; k < stages.size(); k++) {
    loom::TrainOptions opt;
    opt.stop_after = int(5 * (k + 1));
    if (k > 0) opt.resume = "auto";
    const loom::TrainResult part = loom::train(tiny(l, dir, 5, with(stages[k])), context(l), nullptr, opt);
    ASSERT_EQ(part.train_losses.size(), 5u) << "ZeRO-" << stages[k];
    losses.insert(losses.end(), part.train_losses.begin(), part.train_losses.end());
  }
  ASSERT_EQ(losses.size(), want.train_losses.size());
  for (size_t i = 0; i < 10; i++)  // the same layout: bit for bit
    EXPECT_EQ(losses[i], want.train_losses[i]) << "step " << i + 1;
  for (size_t i = 10; i < losses.size(); i++)
    EXPECT_NEAR(losses[i], want.train_losses[i], 1e-4 * std::abs(want.train_losses[i]))
        << "step " << i + 1 << " under ZeRO-" << stages[i / 5];
}

TEST(CheckpointResume, BadBatchesRollBackAndSkipTheirData) {
  if (!batch_splits()) GTEST_SKIP() << "the batch does not split over " << world_size() << " replicas";
  const Layout l = world_layout();
  loom::TrainOptions opt;
  opt.poison_steps = {12, 13, 14};  // data steps whose loss reads as NaN
  const loom::TrainResult r = loom::train(tiny(l, fresh_dir("rollback"), 5), context(l), nullptr, opt);
  EXPECT_EQ(r.skipped_steps, 3);
  EXPECT_EQ(r.rollbacks, 1);
  // Steps 0..14 ran (12..14 skipped, the third rolled back to the step 10
  // checkpoint), then steps 10..19 again on data 15..24: 15 + 10 losses.
  ASSERT_EQ(r.train_losses.size(), 25u);
  for (size_t i = 12; i < 15; i++) EXPECT_TRUE(std::isnan(r.train_losses[i])) << i;
  for (size_t i = 15; i < r.train_losses.size(); i++) EXPECT_TRUE(std::isfinite(r.train_losses[i])) << i;
  EXPECT_LT(r.train_losses.back(), r.train_losses.front());
}

}  // namespace
