// LoRA (issue 39) against PyTorch: tools/make_reference.py --lora wraps
// every block linear of a tiny GPT-2 and a tiny LLaMA with LoRA factors
// (tools/lora_torch.py, written from the paper and PEFT's semantics, not
// from loom), B drawn non-zero so that both factors have gradients from the
// first step. loom, given the same weights, matches its logits and loss,
// the factors' gradients and ten AdamW steps on the factors alone (losses,
// gradient norms, final factors) within 1e-5 relative. And with B = 0 (how
// LoRA starts) the adapted model's logits are the base model's bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/backend.h"
#include "golden/reference_file.h"
#include "kernels/cpu/grad_norm.h"
#include "model/stage_module.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace {

using loom::test::loom_tensor_values;
using loom::test::ReferenceFile;
using loom::test::rel_frobenius;

const ReferenceFile& reference(const std::string& name) { return loom::test::built_reference(name); }

loom::ModelConfig model_config(const ReferenceFile& ref, bool llama) {
  loom::ModelConfig cfg{int(ref.ints.at("vocab_size")), int(ref.ints.at("n_layer")), int(ref.ints.at("n_head")),
                        int(ref.ints.at("d_model")), int(ref.ints.at("seq_len"))};
  if (llama) {
    cfg.family = loom::ModelFamily::llama;
    cfg.n_kv_head = int(ref.ints.at("n_kv_head"));
    cfg.ffn_hidden = int(ref.ints.at("ffn_hidden"));
    cfg.rope_theta = ref.floats.at("rope_theta");
    cfg.norm_eps = ref.floats.at("norm_eps");
  }
  cfg.lora.rank = int(ref.ints.at("lora_rank"));
  cfg.lora.alpha = ref.floats.at("lora_alpha");
  cfg.lora.targets = llama ? std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                      "down_proj"}
                           : std::vector<std::string>{"c_attn", "c_proj", "c_fc"};
  cfg.validate();
  return cfg;
}

struct Loaded {
  int B, T;
  std::unique_ptr<loom::StageModule> model;
  loom::FlatLayout trained;  // the adapters' tensors only
};

Loaded load(const ReferenceFile& ref, bool llama) {
  const loom::ModelConfig cfg = model_config(ref, llama);
  Loaded s;
  s.B = int(ref.ints.at("batch_size"));
  s.T = cfg.seq_len;
  s.model = loom::make_model(cfg, s.B, s.T);
  const loom::ParamLayout& lay = s.model->layout();
  const loom::FlatLayout flat = lay.flat();
  s.trained.total = flat.total;
  for (size_t i = 0; i < lay.params.size(); i++) {
    const std::vector<float> values = loom_tensor_values(ref, "param/", lay.params[i].name);
    EXPECT_EQ(int64_t(values.size()), lay.params[i].numel) << lay.params[i].name;
    std::memcpy(s.model->param(int(i)), values.data(), values.size() * sizeof(float));
    if (loom::is_lora_tensor(lay.params[i].name)) s.trained.tensors.push_back(flat.tensors[i]);
  }
  return s;
}

struct Family {
  const char* reference;
  bool llama;
  int adapters;  // per block
};

class LoraAgreement : public ::testing::TestWithParam<Family> {};

TEST_P(LoraAgreement, LogitsLossAndFactorGradients) {
  const auto& ref = reference(GetParam().reference);
  Loaded s = load(ref, GetParam().llama);
  EXPECT_EQ(int(s.trained.tensors.size()), 2 * GetParam().adapters * int(ref.ints.at("n_layer")));
  const int32_t* inputs = ref.tensor("inputs").i32.data();
  const int32_t* targets = ref.tensor("targets").i32.data();
  s.model->forward(inputs, targets, s.B, s.T);
  EXPECT_LT(rel_frobenius(s.model->logits(), ref.tensor("logits").f32), 1e-5);
  s.model->zero_grads();
  const float loss = s.model->forward_backward(inputs, targets, s.B, s.T);
  EXPECT_NEAR(loss, ref.tensor("loss").f32[0], 1e-6 * std::abs(ref.tensor("loss").f32[0]));
  const loom::ParamLayout& lay = s.model->layout();
  for (size_t i = 0; i < lay.params.size(); i++) {
    if (!loom::is_lora_tensor(lay.params[i].name)) continue;
    const std::vector<float>& want = ref.tensor("grad/" + lay.params[i].name).f32;
    EXPECT_LT(rel_frobenius(s.model->grad(int(i)), want), 1e-5) << lay.params[i].name;
  }
}

TEST_P(LoraAgreement, TenAdamWStepsOnTheFactors) {
  const auto& ref = reference(GetParam().reference);
  Loaded s = load(ref, GetParam().llama);
  const loom::ParamLayout& lay = s.model->layout();
  std::vector<float> base_before(s.model->params(), s.model->params() + lay.total);
  loom::AdamWConfig acfg{float(ref.floats.at("beta1")), float(ref.floats.at("beta2")), float(ref.floats.at("eps")),
                         float(ref.floats.at("weight_decay"))};
  loom::CpuBackend ops;
  loom::AdamW opt(ops, s.trained, acfg);
  const auto& losses = ref.tensor("adam/losses").f32;
  const auto& norms = ref.tensor("adam/grad_norms").f32;
  for (size_t step = 0; step < losses.size(); step++) {
    s.model->zero_grads();
    const float loss =
        s.model->forward_backward(ref.tensor("inputs").i32.data(), ref.tensor("targets").i32.data(), s.B, s.T);
    const double norm = loom::global_grad_norm(ops, s.trained, s.model->grads());
    EXPECT_NEAR(loss, losses[step], 1e-5 * std::abs(losses[step])) << "step " << step;
    EXPECT_NEAR(norm, norms[step], 1e-5 * std::abs(norms[step])) << "step " << step;
    opt.step(s.model->params(), s.model->grads(), float(ref.floats.at("lr")),
             loom::clip_scale(norm, float(ref.floats.at("grad_clip"))));
  }
  for (size_t i = 0; i < lay.params.size(); i++) {
    const loom::ParamSpec& p = lay.params[i];
    if (loom::is_lora_tensor(p.name)) {
      EXPECT_LT(rel_frobenius(s.model->param(int(i)), ref.tensor("final/" + p.name).f32), 1e-5) << p.name;
    } else {
      EXPECT_EQ(std::memcmp(s.model->param(int(i)), base_before.data() + p.offset, size_t(p.numel) * sizeof(float)), 0)
          << p.name << " moved";
    }
  }
}

// B = 0, as LoRA starts: the adapted model's logits are the base model's, bit for bit.
TEST_P(LoraAgreement, ZeroBStartsAsTheBaseModel) {
  const auto& ref = reference(GetParam().reference);
  Loaded s = load(ref, GetParam().llama);
  const loom::ParamLayout& lay = s.model->layout();
  for (size_t i = 0; i < lay.params.size(); i++)
    if (lay.params[i].name.find(".lora_B.") != std::string::npos)
      std::memset(s.model->param(int(i)), 0, size_t(lay.params[i].numel) * sizeof(float));
  loom::ModelConfig base_cfg = model_config(ref, GetParam().llama);
  base_cfg.lora = {};
  auto base = loom::make_model(base_cfg, s.B, s.T);
  for (size_t i = 0; i < base->layout().params.size(); i++) {
    const loom::ParamSpec& p = base->layout().params[i];
    std::memcpy(base->param(int(i)), s.model->param(lay.index_of(p.name)), size_t(p.numel) * sizeof(float));
  }
  const int32_t* inputs = ref.tensor("inputs").i32.data();
  const int32_t* targets = ref.tensor("targets").i32.data();
  const float with_adapters = s.model->forward(inputs, targets, s.B, s.T);
  const float without = base->forward(inputs, targets, s.B, s.T);
  EXPECT_EQ(with_adapters, without);
  const size_t n = size_t(s.B) * s.T * size_t(ref.ints.at("vocab_size"));
  EXPECT_EQ(std::memcmp(s.model->logits(), base->logits(), n * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Gpt2, LoraAgreement, ::testing::Values(Family{"tiny_gpt_lora", false, 4}));
INSTANTIATE_TEST_SUITE_P(Llama, LoraAgreement, ::testing::Values(Family{"tiny_llama_lora", true, 7}));

}  // namespace
