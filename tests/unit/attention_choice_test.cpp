// The attention core a model runs (model.attention, issue 21): the tiled
// (flash-style) core trains like the materialized one — losses and
// first-step gradients agree within the kernels' rounding — for both
// families in fp32, bf16 and fp16, holds fewer activation bytes, and its
// plan is what the module allocates. Selective recomputation has nothing
// to drop from it: bitwise the run without recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "config/run_config.h"
#include "model/stage_module.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

loom::RunConfig config(const std::string& family, const std::string& precision, const std::string& attention,
                       const std::string& recompute = "none") {
  return loom::load_run_config(
      family == "llama" ? LOOM_SOURCE_DIR "/configs/llama-tiny.toml" : LOOM_SOURCE_DIR "/configs/tiny.toml",
      {"model.n_layer=2", "model.vocab_size=300", "model.seq_len=80", "train.batch_size=4",
       "train.micro_batch_size=2", "train.steps=3", "train.eval_every=0", "train.run_dir=\"\"", "runtime.threads=1",
       "precision.compute=\"" + precision + "\"", "model.attention=\"" + attention + "\"",
       "train.recompute=\"" + recompute + "\"", "data.format=\"bytes\"",
       "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

class AttentionChoice : public testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(AttentionChoice, TiledTrainsLikeMaterialized) {
  const auto [family, precision] = GetParam();
  const bool fp32 = std::string(precision) == "fp32";
  auto ctx = loom::ParallelContext::create_single();
  loom::TrainOptions keep;
  keep.keep_first_step_grads = true;
  const loom::TrainResult base = loom::train(config(family, precision, "materialized"), *ctx, nullptr, keep);
  const loom::TrainResult tiled = loom::train(config(family, precision, "tiled"), *ctx, nullptr, keep);
  ASSERT_EQ(base.train_losses.size(), 3u);
  ASSERT_EQ(tiled.train_losses.size(), 3u);
  for (size_t i = 0; i < 3; i++)
    EXPECT_NEAR(tiled.train_losses[i], base.train_losses[i], fp32 ? 2e-5 : 2e-2) << "step " << i;
  ASSERT_EQ(tiled.first_step_grads.size(), base.first_step_grads.size());
  // 16-bit: the materialized core rounds its probabilities to 16 bits, the
  // tiled one never stores them, so they differ by that rounding.
  EXPECT_LT(max_abs_diff(tiled.first_step_grads, base.first_step_grads),
            (fp32 ? 1e-4 : 5e-2) * max_abs(base.first_step_grads));
  const loom::TrainResult again = loom::train(config(family, precision, "tiled", "selective"), *ctx, nullptr, keep);
  EXPECT_EQ(again.train_losses, tiled.train_losses);
  EXPECT_TRUE(std::memcmp(again.first_step_grads.data(), tiled.first_step_grads.data(),
                          tiled.first_step_grads.size() * sizeof(float)) == 0);
}

TEST_P(AttentionChoice, TiledHoldsLessAndThePlanIsExact) {
  const auto [family, precision] = GetParam();
  size_t bytes[2];
  int i = 0;
  for (const char* attention : {"materialized", "tiled"}) {
    const loom::RunConfig cfg = config(family, precision, attention);
    const auto compute = cfg.precision.compute_precision();
    loom::StageBuffers buffers;
    buffers.slots = 2, buffers.compute = compute;
    const auto module = loom::make_stage_module(cfg.model, loom::ModelShard{}, loom::TensorParallel{}, 2,
                                                cfg.model.seq_len, buffers);
    bytes[i] = module->activation_bytes();
    EXPECT_EQ(loom::planned_activation_bytes(cfg.model, loom::ModelShard{}, 2, cfg.model.seq_len, 2, compute,
                                             loom::Recompute::none),
              bytes[i])
        << attention;
    i++;
  }
  EXPECT_LT(bytes[1], bytes[0]);
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndPrecisions, AttentionChoice,
                         testing::Combine(testing::Values("gpt2", "llama"), testing::Values("fp32", "bf16", "fp16")));

TEST(AttentionChoice, AutoPicksTiledForLongSequences) {
  loom::ModelConfig m;
  EXPECT_FALSE(m.tiled_attention(loom::kTiledAttentionFrom - 1));
  EXPECT_TRUE(m.tiled_attention(loom::kTiledAttentionFrom));
  EXPECT_TRUE(m.tiled_attention(64, 2));  // context parallelism needs it
  m.attention = loom::AttentionKind::materialized;
  EXPECT_FALSE(m.tiled_attention(1 << 16));
  m.attention = loom::AttentionKind::tiled;
  EXPECT_TRUE(m.tiled_attention(16));
}

TEST(AttentionChoice, UnknownKindNamesTheField) {
  try {
    config("gpt2", "fp32", "flash");
    FAIL() << "accepted model.attention = flash";
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention"), std::string::npos) << e.what();
  }
}

}  // namespace
