// LoRA adapters exchanged with Hugging Face PEFT (issue 39), both ways, for
// GPT-2 (configs/tiny.toml) and LLaMA (configs/llama-tiny.toml):
//   out: a base trained by loom and exported (`loom export`), a LoRA run on
//     it (train.init_from = "hf:BASE"), `loom export --format peft` and
//     `--format hf --merge`; the real peft library (tools/check_peft.py, in
//     .venv) loads the adapter onto the transformers base with logits within
//     1e-5 relative of loom's base + adapter, and the merged export gives the
//     same logits;
//   in: peft makes an adapter on that base (B drawn non-zero) and saves it;
//     loom reads it (checkpoint/peft_adapter.h) onto the base with logits
//     within 1e-5 relative of peft's, and `loom train` starts from it
//     (train.init_adapter).
// Needs .venv with peft (scripts/setup.sh); skipped without it unless
// LOOM_REQUIRE_HF_INTEROP=1 (`make interop`). The bad inputs need nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "checkpoint/checkpoint_model.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint_test_util.h"
#include "model/stage_module.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_command;
using test::run_loom_cmd;

constexpr int kB = 2;

struct Family {
  const char* name;
  const char* config;
  const char* targets;  // TOML array items and, comma-joined, peft's
  const char* peft_targets;
};

std::string as_bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// Tokens of the bundled text, [kB, T].
std::vector<int32_t> sample_tokens(int T) {
  const std::string text = test::slurp(LOOM_SOURCE_DIR "/data/sample/kjv.txt").substr(7000, size_t(kB * T));
  return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

// The logits [kB, T, V] of `cfg` holding the global tensors `source` gives.
std::vector<float> logits_of(const ModelConfig& cfg, const GlobalTensors& source, const std::vector<int32_t>& tokens) {
  const int T = cfg.seq_len, V = cfg.vocab_size;
  auto model = make_model(cfg, kB, T);
  for (size_t i = 0; i < model->layout().params.size(); i++) {
    const std::vector<float> v = source.read_global(model->layout().params[i].name);
    std::copy(v.begin(), v.end(), model->param(int(i)));
  }
  std::vector<int32_t> none(tokens.size(), -1);
  model->forward(tokens.data(), none.data(), kB, T);
  const int stride = model->vocab_slice().rows;
  std::vector<float> out(size_t(kB) * T * V);
  for (int64_t row = 0; row < int64_t(kB) * T; row++) std::copy_n(model->logits() + row * stride, V, out.begin() + row * V);
  return out;
}

// A GlobalTensors that is `adapter` where it has the tensor, else `base`.
class Overlay : public GlobalTensors {
 public:
  Overlay(const GlobalTensors& base, const GlobalTensors& adapter) : base_(base), adapter_(adapter) {}
  bool has(const std::string& n) const override { return adapter_.has(n) || base_.has(n); }
  const std::vector<int64_t>& global_shape(const std::string& n) const override {
    return adapter_.has(n) ? adapter_.global_shape(n) : base_.global_shape(n);
  }
  void read_region(const std::string& n, const std::vector<int64_t>& o, const std::vector<int64_t>& s,
                   float* out) const override {
    (adapter_.has(n) ? adapter_ : base_).read_region(n, o, s, out);
  }
  using GlobalTensors::read_region;

 private:
  const GlobalTensors &base_, &adapter_;
};

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); i++) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

void exchange(const Family& f) {
  const std::string dir = ckpt_dir(std::string("peft-") + f.name), py = test::hf_python();
  const std::string common = " --set train.eval_every=0 --set train.sample_tokens=0 --set 'train.run_dir=' 2>&1";
  // The base: a few steps of full training, exported as HF.
  auto r = run_loom_cmd("train --config '" + std::string(f.config) + "' --set train.steps=5 --set train.checkpoint_every=5" +
                        " --set train.checkpoint_dir='" + dir + "/base-ckpt'" + common);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_loom_cmd("export --checkpoint '" + dir + "/base-ckpt' --out '" + dir + "/base' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  // LoRA on it, exported both ways.
  const std::string lora = " --set lora.rank=4 --set lora.alpha=8 --set 'lora.targets=[" + std::string(f.targets) + "]'";
  r = run_loom_cmd("train --config '" + std::string(f.config) + "' --set train.init_from='\"hf:" + dir + "/base\"'" + lora +
                   " --set train.steps=8 --set train.lr=2e-2 --set train.warmup_steps=0 --set train.checkpoint_every=8" +
                   " --set train.checkpoint_dir='" + dir + "/lora-ckpt'" + common);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: rank 4"), std::string::npos) << r.output;
  r = run_loom_cmd("export --checkpoint '" + dir + "/lora-ckpt' --format peft --out '" + dir + "/adapter' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_loom_cmd("export --checkpoint '" + dir + "/lora-ckpt' --merge --out '" + dir + "/merged' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;

  Checkpoint ckpt = Checkpoint::open(resolve_resume(dir + "/lora-ckpt", "").dir);
  const CheckpointModel model(ckpt);
  const ModelConfig& cfg = model.config();
  const int T = cfg.seq_len;
  const std::vector<int32_t> tokens = sample_tokens(T);
  const std::vector<float> loom_logits = logits_of(cfg, model, tokens);
  {  // The adapter matters: the base alone computes something else.
    ModelConfig plain = cfg;
    plain.lora = {};
    const double moved = rel(logits_of(plain, *HfCheckpoint::open(dir + "/base", plain), tokens), loom_logits);
    EXPECT_GT(moved, 1e-3) << "the trained adapter barely changes the model";
  }
  test::spit(dir + "/tokens.i32", as_bytes(tokens.data(), tokens.size() * 4));
  test::spit(dir + "/logits.f32", as_bytes(loom_logits.data(), loom_logits.size() * 4));
  const std::string shape = " " + std::to_string(kB) + " " + std::to_string(T);
  auto py_out = run_command("'" + py + "' '" LOOM_SOURCE_DIR "/tools/check_peft.py' load '" + dir + "/base' '" + dir +
                            "/adapter' '" + dir + "/tokens.i32' '" + dir + "/logits.f32'" + shape + " --merged '" + dir +
                            "/merged' 2>&1");
  std::printf("%s", py_out.output.c_str());
  EXPECT_EQ(py_out.code, 0) << py_out.output;
  EXPECT_NE(py_out.output.find("ok peft"), std::string::npos) << py_out.output;
  EXPECT_NE(py_out.output.find("ok merged"), std::string::npos) << py_out.output;

  // In: an adapter peft made, on the same base.
  py_out = run_command("'" + py + "' '" LOOM_SOURCE_DIR "/tools/check_peft.py' make '" + dir + "/base' '" + dir +
                       "/made' '" + dir + "/tokens.i32' '" + dir + "/peft_logits.f32'" + shape +
                       " --rank 4 --alpha 8 --targets " + f.peft_targets + " 2>&1");
  std::printf("%s", py_out.output.c_str());
  ASSERT_EQ(py_out.code, 0) << py_out.output;
  const std::unique_ptr<HfCheckpoint> base = HfCheckpoint::open(dir + "/base", cfg);
  const std::unique_ptr<PeftAdapter> made = PeftAdapter::open(dir + "/made", cfg);
  const std::string peft_bytes = test::slurp(dir + "/peft_logits.f32");
  std::vector<float> peft_logits(peft_bytes.size() / 4);
  std::memcpy(peft_logits.data(), peft_bytes.data(), peft_bytes.size());
  ASSERT_EQ(peft_logits.size(), loom_logits.size());
  const double err = rel(logits_of(cfg, Overlay(*base, *made), tokens), peft_logits);
  std::printf("loom on peft's adapter: logits within %.2e relative of peft's\n", err);
  EXPECT_LT(err, 1e-5);
  // And a run starts from it.
  r = run_loom_cmd("train --config '" + std::string(f.config) + "' --set train.init_from='\"hf:" + dir + "/base\"'" + lora +
                   " --set train.init_adapter='\"" + dir + "/made\"' --set train.steps=1" + common);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("init adapter from"), std::string::npos) << r.output;
}

TEST(PeftInterop, Gpt2AdaptersBothWays) {
  SKIP_WITHOUT_HF_MODULE("peft");
  exchange({"gpt2", LOOM_SOURCE_DIR "/configs/tiny.toml", "\"c_attn\", \"c_proj\", \"c_fc\"", "c_attn,c_proj,c_fc"});
}

TEST(PeftInterop, LlamaAdaptersBothWays) {
  SKIP_WITHOUT_HF_MODULE("peft");
  exchange({"llama", LOOM_SOURCE_DIR "/configs/llama-tiny.toml",
            "\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\", \"down_proj\"",
            "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"});
}

}  // namespace
}  // namespace loom
