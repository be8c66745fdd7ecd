// Asynchronous checkpoints (train.async_checkpoint, train/checkpointing.h),
// one process: the same bytes as a synchronous save; saves back to back;
// a save that fails in the background stops the run at the next save or at
// the end with a UserError naming the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_test_util.h"
#include "config/run_config.h"
#include "core/check.h"
#include "obs/run_reader.h"
#include "train/trainer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using test::ckpt_dir;
using test::slurp;

RunConfig tiny_run(int steps, int every, const std::string& dir, bool async) {
  RunConfig cfg = load_run_config(LOOM_SOURCE_DIR "/configs/tiny.toml", {});
  cfg.data.path = LOOM_SOURCE_DIR "/data/sample/kjv.txt";
  cfg.train.steps = steps;
  cfg.train.eval_every = 0;
  cfg.train.sample_tokens = 0;
  cfg.train.checkpoint_every = every;
  cfg.train.checkpoint_dir = dir;
  cfg.train.keep_checkpoints = 10;
  cfg.train.async_checkpoint = async;
  cfg.runtime.threads = 2;
  return cfg;
}

TrainResult run(const RunConfig& cfg, const TrainOptions& options = {}) {
  return train(cfg, *ParallelContext::create_single(), nullptr, options);
}

TEST(AsyncCheckpoint, ConfigFieldDefaultsOnAndNamesItselfWhenBad) {
  EXPECT_TRUE(load_run_config("", {}).train.async_checkpoint);
  RunConfig off = load_run_config("", {"train.async_checkpoint=false"});
  EXPECT_FALSE(off.train.async_checkpoint);
  EXPECT_NE(off.to_toml().find("async_checkpoint = false"), std::string::npos);
  try {
    load_run_config("", {"train.async_checkpoint=1"});
    FAIL() << "a number for a bool was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("train.async_checkpoint"), std::string::npos) << e.what();
  }
}

TEST(AsyncCheckpoint, WritesTheSameFilesAsASynchronousSave) {
  const std::string sync_dir = ckpt_dir("async-vs-sync.sync"), async_dir = ckpt_dir("async-vs-sync.async");
  TrainResult a = run(tiny_run(4, 2, sync_dir, false)), b = run(tiny_run(4, 2, async_dir, true));
  EXPECT_EQ(a.train_losses, b.train_losses);
  for (const char* step : {"step_000002", "step_000004"}) {
    const std::string file = std::string("/") + step + "/rank_00000.safetensors";
    ASSERT_TRUE(fs::exists(async_dir + file)) << step;
    EXPECT_EQ(slurp(sync_dir + file), slurp(async_dir + file)) << step;
    verify_checkpoint(async_dir + "/" + step);
    CheckpointManifest s = Checkpoint::open(sync_dir + "/" + step).manifest(),
                       x = Checkpoint::open(async_dir + "/" + step).manifest();
    EXPECT_EQ(s.extra, x.extra);
    EXPECT_EQ(s.tensors, x.tensors);
    EXPECT_EQ(s.files[0].sha256, x.files[0].sha256);
  }
  EXPECT_EQ(slurp(async_dir + "/latest"), "step_000004\n");
}

TEST(AsyncCheckpoint, BackToBackSavesEachWaitForTheLastAndRecordTheirStall) {
  const std::string dir = ckpt_dir("async-back-to-back"), runs = ckpt_dir("async-back-to-back.runs");
  RunConfig cfg = tiny_run(4, 1, dir, true);
  TrainOptions options;
  options.run_dir = runs + "/run";
  run(cfg, options);
  for (int step = 1; step <= 4; step++) verify_checkpoint(dir + "/" + step_dir_name(step));
  EXPECT_EQ(slurp(dir + "/latest"), "step_000004\n");
  EXPECT_TRUE(list_step_dirs(dir).size() == 4u);
  obs::RunData data = obs::read_run_dir(options.run_dir);
  ASSERT_EQ(data.steps.size(), 4u);
  for (const obs::StepMetrics& m : data.steps) EXPECT_GT(m.checkpoint_stall_s, 0) << "step " << m.step;
}

// A checkpoint folder under a regular file: nothing can be created there
// (not even by root).
std::string unwritable_dir(const std::string& name) {
  const std::string base = ckpt_dir(name);
  std::ofstream(base + "/not-a-folder") << "x";
  return base + "/not-a-folder/checkpoints";
}

std::string error_of(const RunConfig& cfg) {
  try {
    run(cfg);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AsyncCheckpoint, ABackgroundFailureStopsTheNextSave) {
  const std::string dir = unwritable_dir("async-fails-next");
  const std::string e = error_of(tiny_run(4, 2, dir, true));
  EXPECT_NE(e.find(dir + "/step_000002, saved in the background, failed on rank 0"), std::string::npos) << e;
  EXPECT_NE(e.find("not-a-folder"), std::string::npos) << e;
}

TEST(AsyncCheckpoint, ABackgroundFailureStopsTheEndOfTheRun) {
  const std::string dir = unwritable_dir("async-fails-end");
  const std::string e = error_of(tiny_run(2, 2, dir, true));
  EXPECT_NE(e.find(dir + "/step_000002, saved in the background, failed"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom
