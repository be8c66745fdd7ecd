// Activation recomputation on one process (issue 18): both families, fp32,
// bf16 and fp16 — selective and full recomputation give bitwise the losses
// and first-step gradients of the run without it, hold fewer activation
// bytes (full fewest), and the pure plan the planner reads
// (planned_activation_bytes) is exactly what the module allocates.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>

#include "config/run_config.h"
#include "model/stage_module.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

loom::RunConfig config(const std::string& family, const std::string& precision, const std::string& recompute) {
  return loom::load_run_config(
      family == "llama" ? LOOM_SOURCE_DIR "/configs/llama-tiny.toml" : LOOM_SOURCE_DIR "/configs/tiny.toml",
      {"model.n_layer=3", "model.vocab_size=300", "model.seq_len=32", "train.batch_size=4",
       "train.micro_batch_size=2", "train.steps=3", "train.eval_every=0", "train.run_dir=\"\"", "runtime.threads=1",
       "precision.compute=\"" + precision + "\"", "train.recompute=\"" + recompute + "\"", "data.format=\"bytes\"",
       "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class RecomputeSingle : public testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(RecomputeSingle, IsBitwiseTheRunWithoutIt) {
  const auto [family, precision] = GetParam();
  auto ctx = loom::ParallelContext::create_single();
  loom::TrainOptions keep;
  keep.keep_first_step_grads = true;
  const loom::TrainResult base = loom::train(config(family, precision, "none"), *ctx, nullptr, keep);
  ASSERT_EQ(base.train_losses.size(), 3u);
  for (const char* mode : {"selective", "full"}) {
    const loom::TrainResult got = loom::train(config(family, precision, mode), *ctx, nullptr, keep);
    EXPECT_TRUE(bitwise_equal(got.train_losses, base.train_losses)) << mode;
    EXPECT_TRUE(bitwise_equal(got.first_step_grads, base.first_step_grads)) << mode;
  }
}

TEST_P(RecomputeSingle, HoldsFewerActivationsAndThePlanIsExact) {
  const auto [family, precision] = GetParam();
  const loom::RunConfig cfg = config(family, precision, "none");
  const auto compute = cfg.precision.compute_precision();
  size_t bytes[3];
  int i = 0;
  for (loom::Recompute r : {loom::Recompute::none, loom::Recompute::selective, loom::Recompute::full}) {
    loom::StageBuffers buffers;
    buffers.slots = 2, buffers.compute = compute, buffers.recompute = r;
    const auto module = loom::make_stage_module(cfg.model, loom::ModelShard{}, loom::TensorParallel{}, 2,
                                                cfg.model.seq_len, buffers);
    bytes[i] = module->activation_bytes();
    EXPECT_EQ(loom::planned_activation_bytes(cfg.model, loom::ModelShard{}, 2, cfg.model.seq_len, 2, compute, r),
              bytes[i])
        << to_string(r);
    i++;
  }
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_LT(bytes[2], bytes[1]);
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndPrecisions, RecomputeSingle,
                         testing::Combine(testing::Values("gpt2", "llama"), testing::Values("fp32", "bf16", "fp16")));

}  // namespace
