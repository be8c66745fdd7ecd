// Activation recomputation under mpirun (issue 18): selective and full
// recomputation run the same kernels on the same inputs in the same order,
// so in every layout (data parallel with ZeRO, tensor parallel with sequence
// parallelism, pipeline parallel under each schedule, 3D) and in fp32 and
// bf16 the losses and first-step gradients are bitwise those of the same
// layout without recomputation, for both families — while the activation
// memory falls.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm/layout_check.h"
#include "config/run_config.h"
#include "train/trainer.h"

namespace {

using loom::test::world_size;

struct Case {
  const char* family;  // "gpt2" or "llama"
  int tp, pp;
  const char* schedule;
  int m, v;
  bool sequence_parallel;
  int zero;
  const char* precision;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.family) + "_tp" + std::to_string(c.tp) + "_pp" + std::to_string(c.pp) + "_" + c.schedule +
         "_m" + std::to_string(c.m) + "_v" + std::to_string(c.v) + (c.sequence_parallel ? "_sp" : "") + "_zero" +
         std::to_string(c.zero) + "_" + c.precision;
}

constexpr int kBatch = 8;

loom::RunConfig config(const Case& c, int dp, const char* recompute) {
  const bool llama = std::string(c.family) == "llama";
  return loom::load_run_config(
      llama ? LOOM_SOURCE_DIR "/configs/llama-tiny.toml" : LOOM_SOURCE_DIR "/configs/tiny.toml",
      {"model.n_layer=4", "model.vocab_size=300", "model.seq_len=32", "train.batch_size=" + std::to_string(kBatch),
       "train.micro_batch_size=" + std::to_string(kBatch / (dp * c.m)), "train.steps=4", "train.eval_every=0",
       "train.run_dir=\"\"", "runtime.threads=1", "parallel.zero=" + std::to_string(c.zero),
       "parallel.tp=" + std::to_string(c.tp), "parallel.pp=" + std::to_string(c.pp),
       std::string("parallel.schedule=\"") + c.schedule + "\"", "parallel.virtual_stages=" + std::to_string(c.v),
       std::string("parallel.sequence_parallel=") + (c.sequence_parallel ? "true" : "false"),
       "parallel.bucket_mb=0.05", std::string("precision.compute=\"") + c.precision + "\"",
       std::string("train.recompute=\"") + recompute + "\"", "data.format=\"bytes\"",
       "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Recompute : public testing::TestWithParam<Case> {};

TEST_P(Recompute, IsBitwiseTheRunWithoutIt) {
  const Case c = GetParam();
  const int world = world_size();
  if (world % (c.tp * c.pp) != 0) GTEST_SKIP() << "tp x pp does not divide " << world;
  const int dp = world / (c.tp * c.pp);
  if (kBatch % (dp * c.m) != 0) GTEST_SKIP() << "batch does not split";
  if (c.zero > 0 && dp == 1) GTEST_SKIP() << "ZeRO needs dp > 1";
  const auto& ctx = loom::test::world_context(c.tp, c.pp);
  loom::TrainOptions keep;
  keep.keep_first_step_grads = true;
  const loom::TrainResult base = loom::train(config(c, dp, "none"), ctx, nullptr, keep);
  for (const char* mode : {"selective", "full"}) {
    const loom::TrainResult got = loom::train(config(c, dp, mode), ctx, nullptr, keep);
    EXPECT_TRUE(bitwise_equal(got.train_losses, base.train_losses)) << mode << ": losses differ";
    EXPECT_TRUE(bitwise_equal(got.first_step_grads, base.first_step_grads))
        << mode << ": first-step gradients differ on rank " << ctx.rank();
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* family : {"gpt2", "llama"}) {
    out.push_back({family, 1, 1, "1f1b", 2, 1, false, 1, "fp32"});        // data parallel, accumulation, ZeRO-1
    out.push_back({family, 2, 1, "1f1b", 1, 1, true, 0, "fp32"});         // tensor + sequence parallel
    out.push_back({family, 1, 2, "gpipe", 4, 1, false, 0, "fp32"});       // pipeline, each schedule
    out.push_back({family, 1, 2, "1f1b", 4, 1, false, 0, "bf16"});
    out.push_back({family, 1, 2, "interleaved", 4, 2, false, 0, "fp32"});
    out.push_back({family, 2, 2, "1f1b", 2, 1, true, 2, "bf16"});         // 3D at 8 ranks, ZeRO-2, bf16
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Recompute, testing::ValuesIn(cases()), case_name);

}  // namespace
