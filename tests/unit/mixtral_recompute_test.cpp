// Recomputation with mixture-of-experts blocks (issue 40): selective and
// full recomputation reproduce the stored run bitwise (the router's choice
// made again from the same inputs with the same bias), with a shared expert, the z-loss and the per-sequence loss
// in the backward and aux_free biases moving between steps.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

loom::TrainResult run(const std::string& recompute, const std::string& balance) {
  loom::RunConfig cfg = loom::load_run_config(
      LOOM_SOURCE_DIR "/configs/mixtral-tiny.toml",
      {"train.steps=4", "train.eval_every=0", "train.sample_tokens=0", "train.run_dir=\"\"", "runtime.threads=1",
       "train.micro_batch_size=4", "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\"",
       "train.recompute=\"" + recompute + "\"", "model.moe_balance=\"" + balance + "\"", "model.moe_bias_rate=0.05",
       "model.moe_aux_coef=0.1"});
  loom::TrainOptions o;
  o.keep_first_step_grads = true;
  return loom::train(cfg, *loom::ParallelContext::create_single(), nullptr, o);
}

TEST(MixtralRecompute, SelectiveAndFullAreBitwiseTheStoredRun) {
  for (const char* balance : {"aux_free", "sequence"}) {
    SCOPED_TRACE(balance);
    const loom::TrainResult stored = run("none", balance);
    ASSERT_EQ(stored.moe_steps.size(), 4u);
    for (const char* mode : {"selective", "full"}) {
      SCOPED_TRACE(mode);
      const loom::TrainResult again = run(mode, balance);
      ASSERT_EQ(again.train_losses.size(), stored.train_losses.size());
      EXPECT_EQ(0, std::memcmp(again.train_losses.data(), stored.train_losses.data(),
                               stored.train_losses.size() * sizeof(float)));
      ASSERT_EQ(again.first_step_grads.size(), stored.first_step_grads.size());
      EXPECT_EQ(0, std::memcmp(again.first_step_grads.data(), stored.first_step_grads.data(),
                               stored.first_step_grads.size() * sizeof(float)));
      for (size_t i = 0; i < stored.moe_steps.size(); i++) {  // the same routing every step
        EXPECT_EQ(again.moe_steps[i].load_max, stored.moe_steps[i].load_max) << "step " << i;
        EXPECT_EQ(again.moe_steps[i].aux_loss, stored.moe_steps[i].aux_loss) << "step " << i;
        EXPECT_EQ(again.moe_steps[i].bias_max, stored.moe_steps[i].bias_max) << "step " << i;
      }
    }
  }
}

}  // namespace
