#include <gtest/gtest.h>

#include <algorithm>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/model_fields.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "core/rng.h"
#include "model/stage_module.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_command;
using test::run_loom_cmd;

// A GPT saved as tensor-parallel ranks (tp pieces per rank file) under root.
std::string save_gpt(StageModule& model, const std::string& root, int tp, const std::string& config_toml) {
  CheckpointWriter w(root, 50);
  std::vector<int> ranks;
  for (int r = 0; r < tp; r++) {
    test::RankPieces rp = test::tp_pieces(model, tp, r);
    w.write_rank_file(r, rp.pieces);
    ranks.push_back(r);
  }
  CheckpointManifest m;
  m.step = 50;
  m.config_toml = config_toml;
  m.model = model_fields(model.config());
  m.layout.tp = tp;
  m.layout.world_size = tp;
  return w.commit(m, ranks, 2).dir;
}

std::string bytes_config() { return "[model]\nvocab_size = 256\n[data]\nformat = \"bytes\"\npath = \"data/sample/kjv.txt\"\n"; }

TEST(ExportHf, LogitsMatchPyTorchOnTheExportedTensors) {
  const std::string dir = ckpt_dir("export-hf");
  const ModelConfig cfg{96, 2, 2, 32, 16};
  const int B = 2, T = 16;
  auto model_owner = make_model(cfg, B, T);
  StageModule& model = *model_owner;
  model.init_parameters(11);
  // Non-trivial layernorms and biases, so that a misplaced one shows.
  for (size_t i = 0; i < model.layout().params.size(); i++) {
    const ParamSpec& p = model.layout().params[i];
    if (p.shape.size() == 1)
      for (int64_t j = 0; j < p.numel; j++) model.param(int(i))[j] += 0.1f * float(rng_normal(5, i, uint64_t(j)));
  }
  save_gpt(model, dir + "/ckpt", 2, "[model]\nvocab_size = 96\n");
  std::vector<int32_t> tokens(B * T), targets(B * T, -1);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(rng_uniform(9, 1, i) * cfg.vocab_size);
  model.forward(tokens.data(), targets.data(), B, T);
  test::spit(dir + "/tokens.i32", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4));
  test::spit(dir + "/logits.f32",
             std::string(reinterpret_cast<const char*>(model.logits()), size_t(B) * T * cfg.vocab_size * 4));

  // The root (with `latest`) or the step folder both work.
  auto r = run_loom_cmd("export --checkpoint '" + dir + "/ckpt' --format hf --out '" + dir + "/hf' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step 50"), std::string::npos) << r.output;

  SafetensorsFile f = SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), 4u + 12u * 2u);
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);  // tied
  const StTensorInfo* qkv = f.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{32, 96}));  // Conv1D: [in, out]
  const ParamSpec* p = model.layout().find("h.1.attn.c_attn.weight");
  const float* w = model.params() + p->offset;
  float v;
  f.read_floats(*qkv, 5 * 96 + 70, 1, &v);  // HF [in=5, out=70] is loom [out=70, in=5]
  EXPECT_EQ(v, w[70 * 32 + 5]);

  auto py = run_command("/usr/bin/python3 '" LOOM_SOURCE_DIR "/tools/check_hf_export.py' '" + dir + "/hf' '" + dir +
                        "/tokens.i32' '" + dir + "/logits.f32' 2 16 2>&1");
  EXPECT_EQ(py.code, 0) << py.output;
  EXPECT_NE(py.output.find("ok HF GPT-2 math: logits match"), std::string::npos) << py.output;
  EXPECT_NE(py.output.find("ok gpt_torch.GPT: logits match"), std::string::npos) << py.output;

  // A broken export is caught by the checker: swap in an untransposed square projection.
  r = run_loom_cmd("export --checkpoint '" + dir + "/ckpt/step_000050' --out '" + dir + "/hf16' --dtype bf16 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(SafetensorsFile::open(dir + "/hf16/model.safetensors").find("transformer.wte.weight")->dtype, StDType::BF16);
  py = run_command("/usr/bin/python3 '" LOOM_SOURCE_DIR "/tools/check_hf_export.py' '" + dir + "/hf16' '" + dir +
                   "/tokens.i32' '" + dir + "/logits.f32' 2 16 --atol 1e-9 2>&1");
  EXPECT_EQ(py.code, 1) << py.output;  // bf16 weights cannot match fp32 logits to 1e-9
  EXPECT_NE(py.output.find("FAIL"), std::string::npos) << py.output;
}

TEST(ExportHf, BadInputExitsTwoNamingTheFile) {
  const std::string dir = ckpt_dir("export-bad");
  auto r = run_loom_cmd("export --checkpoint '" + dir + "/nothing' --out '" + dir + "/hf' 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir + "/nothing"), std::string::npos) << r.output;
  // A checkpoint that lacks a parameter.
  std::vector<float> w(4, 1.0f);
  CheckpointManifest m;
  m.step = 1;
  m.model = model_fields(ModelConfig{96, 1, 2, 32, 16});
  save_checkpoint(dir + "/partial", m, {{"wte.weight", {2, 2}, {}, {}, 0, -1, w.data()}}, 1);
  r = run_loom_cmd("export --checkpoint '" + dir + "/partial' --out '" + dir + "/hf' 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("wte.weight"), std::string::npos) << r.output;  // the wrong shape
  r = run_loom_cmd("export --checkpoint '" + dir + "/partial' --out '" + dir + "/hf' --format onnx 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf/model.safetensors"));
}

// The greedy continuation loom generate prints is the argmax chain of the
// same model run here, whatever the layout the checkpoint was saved from.
TEST(GenerateCli, GreedyFollowsTheModelsArgmaxAndSamplingIsSeeded) {
  const std::string dir = ckpt_dir("generate");
  const ModelConfig cfg{256, 2, 2, 32, 24};
  auto model_owner = make_model(cfg, 1, cfg.seq_len);
  StageModule& model = *model_owner;
  model.init_parameters(21);
  save_gpt(model, dir + "/plain", 2, bytes_config());
  // Sharpen the output so that greedy picks are far from ties.
  float* wte = model.params() + model.layout().find("wte.weight")->offset;
  for (int64_t i = 0; i < int64_t(cfg.vocab_size) * cfg.d_model; i++) wte[i] *= 4;
  save_gpt(model, dir + "/ckpt", 2, bytes_config());

  const std::string prompt = "In the beginning";
  std::vector<int32_t> ctx(prompt.begin(), prompt.end());
  std::string want = prompt;
  for (int n = 0; n < 12; n++) {
    size_t keep = std::min(ctx.size(), size_t(cfg.seq_len));  // the window slides past seq_len
    std::vector<int32_t> window(ctx.end() - long(keep), ctx.end()), none(keep, -1);
    model.forward(window.data(), none.data(), 1, int(keep));
    const float* last = model.logits() + (keep - 1) * cfg.vocab_size;
    int32_t next = int32_t(std::max_element(last, last + cfg.vocab_size) - last);
    ctx.push_back(next);
    want += char(uint8_t(next));
  }
  want += "\n";
  const std::string base = "generate --checkpoint '" + dir + "/ckpt' --prompt '" + prompt + "' --max-tokens 12 ";
  auto greedy = run_loom_cmd(base + "--temperature 0 2>/dev/null");
  ASSERT_EQ(greedy.code, 0);
  EXPECT_EQ(greedy.output, want);
  auto top1 = run_loom_cmd(base + "--temperature 1 --top-k 1 --seed 5 2>/dev/null");
  EXPECT_EQ(top1.output, want);

  // Sampling from the unsharpened model (close to uniform over 256 bytes).
  const std::string plain = "generate --checkpoint '" + dir + "/plain' --prompt '" + prompt + "' --max-tokens 12 ";
  auto a = run_loom_cmd(plain + "--temperature 1.5 --top-k 0 --seed 1 2>/dev/null");
  auto b = run_loom_cmd(plain + "--temperature 1.5 --top-k 0 --seed 1 2>/dev/null");
  auto c = run_loom_cmd(plain + "--temperature 1.5 --top-k 0 --seed 2 2>/dev/null");
  ASSERT_EQ(a.code, 0);
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  EXPECT_EQ(a.output.size(), want.size());

  // Raw bytes: a sampled NUL is printed like any other byte. Near-uniform
  // sampling of 300 bytes draws a 0 with probability 1 - (255/256)^300 = 69%;
  // the first seed whose output holds one checks the whole output's length.
  bool saw_nul = false;
  for (int seed = 1; seed <= 8 && !saw_nul; seed++) {
    auto r = run_loom_cmd("generate --checkpoint '" + dir + "/plain' --prompt '" + prompt +
                          "' --max-tokens 300 --temperature 1.5 --top-k 0 --seed " + std::to_string(seed) +
                          " 2>/dev/null");
    ASSERT_EQ(r.code, 0);
    EXPECT_EQ(r.output.size(), prompt.size() + 300 + 1) << "seed " << seed << ": bytes lost or added";
    saw_nul = r.output.find('\0') != std::string::npos;
  }
  EXPECT_TRUE(saw_nul) << "no NUL in 8 x 300 sampled bytes";
}

TEST(GenerateCli, BadInputExitsTwo) {
  const std::string dir = ckpt_dir("generate-bad");
  auto r = run_loom_cmd("generate --checkpoint '" + dir + "/none' --prompt hi 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(dir + "/none"), std::string::npos) << r.output;
  r = run_loom_cmd("generate --prompt hi 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--checkpoint"), std::string::npos) << r.output;
  r = run_loom_cmd("generate --checkpoint x --prompt hi --temperature -1 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--temperature"), std::string::npos) << r.output;
}

TEST(CheckpointBench, RunsAndReportsEveryRate) {
  const std::string dir = ckpt_dir("bench");
  auto r = run_loom_cmd("bench checkpoint --mb 2 --ranks 2 --repeat 1 --dir '" + dir +
                        "/b' --stall-model " LOOM_SOURCE_DIR "/configs/tiny.toml 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* row : {"save (write+sha256+commit)", "plain copy", "plain read", "verify", "load",
                          "sync save (stall)", "async save (stall)", "async background write", "async stall / sync save"})
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/b"));
}

}  // namespace
}  // namespace loom
