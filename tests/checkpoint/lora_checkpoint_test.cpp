// LoRA checkpoints (issue 39): a run's checkpoints hold the adapters and
// their AdamW moments, not the frozen base; resuming continues exactly
// (the losses after the checkpoint are the uninterrupted run's, bit for
// bit as printed), and every mismatch exits 2 naming what differs: a
// checkpoint resumed on another base, by a run with another rank or
// without [lora], `--format peft` on a run without LoRA, an adapter folder
// with another rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "checkpoint_test_util.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_loom_cmd;

const std::string kConfig = LOOM_SOURCE_DIR "/configs/tiny.toml";
const std::string kLora = " --set lora.rank=4 --set lora.alpha=8 --set 'lora.targets=[\"c_attn\", \"c_fc\"]'";
const std::string kQuiet = " --set train.eval_every=0 --set train.sample_tokens=0 --set 'train.run_dir=' --set train.log_every=1";

std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> out;
  const std::regex step(R"(step +(\d+)/\d+ \| loss ([0-9.]+))");
  for (std::sregex_iterator it(log.begin(), log.end(), step), end; it != end; ++it) out.push_back((*it)[2]);
  return out;
}

TEST(LoraCheckpoint, HoldsTheAdaptersAloneAndResumesExactly) {
  const std::string dir = ckpt_dir("lora-resume");
  const std::string run = "train --config '" + kConfig + "'" + kLora + kQuiet + " --set train.steps=8";
  auto whole = run_loom_cmd(run + " 2>&1");
  ASSERT_EQ(whole.code, 0) << whole.output;
  auto first = run_loom_cmd(run + " --set train.checkpoint_every=4 --set train.checkpoint_dir='" + dir +
                            "/ck' --set train.steps=4 2>&1");
  ASSERT_EQ(first.code, 0) << first.output;
  // Only adapter tensors (and their moments) in the checkpoint.
  const std::string manifest = test::slurp(dir + "/ck/step_000004/manifest.json");
  EXPECT_EQ(manifest.find("\"h.0.attn.c_attn.weight\""), std::string::npos) << "the frozen base was written";
  EXPECT_NE(manifest.find("\"h.0.attn.c_attn.lora_B.weight\""), std::string::npos);
  EXPECT_NE(manifest.find("\"adam.v.h.1.mlp.c_fc.lora_A.weight\""), std::string::npos);
  EXPECT_NE(manifest.find("\"lora_base\": \"init seed 1337\""), std::string::npos) << manifest;
  auto resumed = run_loom_cmd(run + " --set train.checkpoint_dir='" + dir + "/ck' --resume auto 2>&1");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto want = losses(whole.output), got = losses(resumed.output);
  ASSERT_EQ(want.size(), 8u) << whole.output;
  ASSERT_EQ(got.size(), 4u) << resumed.output;
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(got[i], want[4 + i]) << "step " << 5 + i;

  // Another rank, no [lora], another base: exit 2, naming it.
  auto other = run_loom_cmd(run + " --set lora.rank=2 --set train.checkpoint_dir='" + dir + "/ck' --resume auto 2>&1");
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("lora.rank is 4 there, 2"), std::string::npos) << other.output;
  other = run_loom_cmd("train --config '" + kConfig + "'" + kQuiet + " --set train.checkpoint_dir='" + dir +
                       "/ck' --resume auto 2>&1");
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("holds LoRA adapters (rank 4) and not their base"), std::string::npos) << other.output;

  // --format peft on a full run's checkpoint; --format hf without --merge on a LoRA one.
  auto full = run_loom_cmd("train --config '" + kConfig + "'" + kQuiet + " --set train.steps=2 --set train.checkpoint_every=2" +
                           " --set train.checkpoint_dir='" + dir + "/full' 2>&1");
  ASSERT_EQ(full.code, 0) << full.output;
  auto e = run_loom_cmd("export --checkpoint '" + dir + "/full' --format peft --out '" + dir + "/x' 2>&1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("--format peft needs a LoRA checkpoint"), std::string::npos) << e.output;
  e = run_loom_cmd("export --checkpoint '" + dir + "/ck' --out '" + dir + "/x' 2>&1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("needs --merge"), std::string::npos) << e.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x/model.safetensors")) << "written half-way";

  // An adapter folder of another rank.
  e = run_loom_cmd("export --checkpoint '" + dir + "/ck' --format peft --out '" + dir + "/adapter' 2>&1");
  ASSERT_EQ(e.code, 0) << e.output;
  e = run_loom_cmd(run + " --set lora.rank=2 --set train.init_adapter='\"" + dir + "/adapter\"' 2>&1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("field 'r' is 4 but this run's lora.rank is 2"), std::string::npos) << e.output;
}

// A LoRA run on a Hugging Face base records that base's fingerprint; resuming
// on another base folder exits 2, and generate --base finds a moved one.
TEST(LoraCheckpoint, ResumingOnAnotherBaseIsRefused) {
  const std::string dir = ckpt_dir("lora-base");
  auto r = run_loom_cmd("train --config '" + kConfig + "'" + kQuiet + " --set train.steps=4 --set train.checkpoint_every=2" +
                        " --set train.keep_checkpoints=2 --set train.checkpoint_dir='" + dir + "/full' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* step : {"2", "4"}) {
    r = run_loom_cmd("export --checkpoint '" + dir + "/full/step_00000" + step + "' --out '" + dir + "/base" + step + "' 2>&1");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  const std::string lora = "train --config '" + kConfig + "'" + kLora + kQuiet + " --set train.checkpoint_dir='" + dir + "/ck'";
  r = run_loom_cmd(lora + " --set train.init_from='\"hf:" + dir + "/base2\"' --set train.steps=2 --set train.checkpoint_every=2 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_loom_cmd(lora + " --set train.init_from='\"hf:" + dir + "/base4\"' --set train.steps=4 --resume auto 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds LoRA adapters trained on the base"), std::string::npos) << r.output;
  // The base folder moved: generate is told where it is.
  std::filesystem::rename(dir + "/base2", dir + "/moved");
  r = run_loom_cmd("generate --checkpoint '" + dir + "/ck' --prompt In --max-tokens 4 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_loom_cmd("generate --checkpoint '" + dir + "/ck' --base '" + dir + "/moved' --prompt In --max-tokens 4 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_loom_cmd("generate --checkpoint '" + dir + "/ck' --base '" + dir + "/base4' --prompt In --max-tokens 4 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
}

}  // namespace
}  // namespace loom
