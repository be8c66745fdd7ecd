// Mixtral checkpoints (issue 40): a run resumes exactly (the losses after the
// checkpoint are the uninterrupted run's as printed, and so are the expert
// loads: the aux_free balancing's biases, moving fast here, are restored), and a mixture of
// experts resumed as a dense model, or a dense checkpoint as a mixture of
// experts, exits 2 naming what differs; a model MixtralForCausalLM cannot
// express (experts in every other block) and Qwen2MoeForCausalLM cannot
// either (no shared expert) exits 2 on export and writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "checkpoint_test_util.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_loom_cmd;

// Each step's loss and expert loads as logged.
std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> out;
  const std::regex step(R"(step +\d+/\d+ \| (loss [0-9.]+ .*\| experts [0-9.-]+))");
  for (std::sregex_iterator it(log.begin(), log.end(), step), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

TEST(MoeCheckpoint, ResumesExactlyAndRefusesADenseRun) {
  const std::string dir = ckpt_dir("moe");
  const std::string base = "train --config '" LOOM_SOURCE_DIR "/configs/llama-tiny.toml' --set train.eval_every=0 "
                           "--set train.sample_tokens=0 --set 'train.run_dir=' --set train.log_every=1 ";
  const std::string moe = base + "--set model.family='\"mixtral\"' --set model.n_experts=4 --set model.moe_ffn_hidden=32 "
                          "--set model.moe_bias_rate=0.05 ";
  auto whole = run_loom_cmd(moe + "--set train.steps=6 2>&1");
  ASSERT_EQ(whole.code, 0) << whole.output;
  auto first = run_loom_cmd(moe + "--set train.steps=3 --set train.checkpoint_every=3 --set train.checkpoint_dir='" +
                            dir + "/ck' 2>&1");
  ASSERT_EQ(first.code, 0) << first.output;
  auto resumed = run_loom_cmd(moe + "--set train.steps=6 --set train.checkpoint_dir='" + dir + "/ck' --resume auto 2>&1");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto want = losses(whole.output), got = losses(resumed.output);
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; i++) EXPECT_EQ(got[i], want[3 + i]) << "step " << 4 + i;

  // loom generate routes with the checkpoint's biases (read beside the parameters).
  auto gen = run_loom_cmd("generate --checkpoint '" + dir + "/ck' --prompt 'And God' --max-tokens 8 "
                          "--temperature 0 2>&1");
  EXPECT_EQ(gen.code, 0) << gen.output;
  EXPECT_NE(gen.output.find("And God"), std::string::npos) << gen.output;
  // Its biases have no place in MixtralForCausalLM: refused unless dropped.
  auto refused = run_loom_cmd("export --checkpoint '" + dir + "/ck' --out '" + dir + "/hf_bias' 2>&1");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--drop-router-bias"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf_bias/model.safetensors"));
  auto dropped = run_loom_cmd("export --checkpoint '" + dir + "/ck' --out '" + dir + "/hf_bias' --drop-router-bias 2>&1");
  EXPECT_EQ(dropped.code, 0) << dropped.output;

  auto dense = run_loom_cmd(base + "--set train.steps=6 --set train.checkpoint_dir='" + dir + "/ck' --resume auto 2>&1");
  EXPECT_EQ(dense.code, 2) << dense.output;
  EXPECT_NE(dense.output.find("is a mixture of experts (4 experts"), std::string::npos) << dense.output;
  auto d = run_loom_cmd(base + "--set train.steps=2 --set train.checkpoint_every=2 --set train.checkpoint_dir='" + dir +
                        "/dense' 2>&1");
  ASSERT_EQ(d.code, 0) << d.output;
  auto as_moe = run_loom_cmd(moe + "--set train.steps=4 --set train.checkpoint_dir='" + dir + "/dense' --resume auto 2>&1");
  EXPECT_EQ(as_moe.code, 2) << as_moe.output;
  EXPECT_NE(as_moe.output.find("is a dense model; this run's is a mixture of experts"), std::string::npos)
      << as_moe.output;

  auto every2 = run_loom_cmd(moe + "--set model.n_layer=2 --set model.moe_every=2 --set train.steps=1 "
                             "--set train.checkpoint_every=1 --set train.checkpoint_dir='" + dir + "/every2' 2>&1");
  ASSERT_EQ(every2.code, 0) << every2.output;
  auto e = run_loom_cmd("export --checkpoint '" + dir + "/every2' --out '" + dir + "/hf' 2>&1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("model.moe_shared_ffn is 0"), std::string::npos) << e.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf/model.safetensors"));
}

}  // namespace
}  // namespace loom
