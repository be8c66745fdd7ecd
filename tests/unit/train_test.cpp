#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "config/run_config.h"
#include "core/check.h"
#include "train/trainer.h"

namespace {

loom::RunConfig tiny_run(int steps) {
  auto cfg = loom::load_run_config(LOOM_SOURCE_DIR "/configs/tiny.toml", {});
  cfg.data.path = LOOM_SOURCE_DIR "/data/sample/kjv.txt";
  cfg.train.steps = steps;
  cfg.runtime.threads = 2;
  return cfg;
}

TEST(Train, LossFalls) {
  auto result = loom::train(tiny_run(40), *loom::ParallelContext::create_single(), nullptr);
  ASSERT_EQ(result.train_losses.size(), 40u);
  EXPECT_NEAR(result.train_losses.front(), std::log(256.0), 0.3);  // uniform over bytes at init
  float last5 = 0;
  for (int i = 35; i < 40; i++) last5 += result.train_losses[i] / 5;
  EXPECT_LT(last5, result.train_losses.front() - 1.5f);
  ASSERT_FALSE(result.val_losses.empty());
  EXPECT_LT(result.val_losses.back(), result.train_losses.front() - 1.5f);
}

TEST(Train, SameSeedIsBitwiseIdentical) {
  auto a = loom::train(tiny_run(8), *loom::ParallelContext::create_single(), nullptr), b = loom::train(tiny_run(8), *loom::ParallelContext::create_single(), nullptr);
  ASSERT_EQ(a.train_losses.size(), b.train_losses.size());
  EXPECT_EQ(0, std::memcmp(a.train_losses.data(), b.train_losses.data(), a.train_losses.size() * sizeof(float)));
  auto other = tiny_run(8);
  other.train.seed = 99;
  auto c = loom::train(other, *loom::ParallelContext::create_single(), nullptr);
  EXPECT_NE(0, std::memcmp(a.train_losses.data(), c.train_losses.data(), a.train_losses.size() * sizeof(float)));
}

TEST(Train, MissingDataFileIsAUserError) {
  auto cfg = tiny_run(2);
  cfg.data.path = "/nonexistent/corpus.txt";
  try {
    loom::train(cfg, *loom::ParallelContext::create_single(), nullptr);
    FAIL() << "expected UserError";
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus.txt"), std::string::npos) << e.what();
  }
}

// The LLaMA smoke config trains: the loss falls from uniform over bytes.
TEST(Train, LlamaLossFalls) {
  auto cfg = loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml", {});
  cfg.data.path = LOOM_SOURCE_DIR "/data/sample/kjv.txt";
  cfg.runtime.threads = 2;
  auto result = loom::train(cfg, *loom::ParallelContext::create_single(), nullptr);
  ASSERT_EQ(result.train_losses.size(), size_t(cfg.train.steps));
  EXPECT_NEAR(result.train_losses.front(), std::log(256.0), 0.3);
  EXPECT_LT(result.train_losses.back(), result.train_losses.front() - 1.5f);
}

// tp must give every rank whole key/value heads (loom does not replicate them).
TEST(Train, TensorParallelMustDivideKvHeads) {
  auto cfg = loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml", {});  // 4 heads, 2 kv heads
  EXPECT_NO_THROW(loom::check_layout(cfg, loom::ParallelGrid::for_world(2, 0, 2, 1)));
  try {
    loom::check_layout(cfg, loom::ParallelGrid::for_world(4, 0, 4, 1));
    ADD_FAILURE() << "tp = 4 over 2 kv heads was accepted";
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head"), std::string::npos) << e.what();
  }
}

}  // namespace
