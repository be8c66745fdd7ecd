#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/stage_module.h"
#include "model/param_layout.h"

namespace {

loom::ModelConfig small_config() { return loom::ModelConfig{64, 3, 2, 32, 16}; }

TEST(ParamLayout, OffsetsAlignedDisjointAndInBackwardOrder) {
  auto lay = loom::ParamLayout::for_model(small_config());
  ASSERT_EQ(lay.params.front().name, "ln_f.weight");
  EXPECT_EQ(lay.params.back().name, "wte.weight");
  EXPECT_EQ(lay.params[2].name, "h.2.mlp.c_proj.weight");  // the last layer comes first
  int64_t end = 0, counted = 0;
  for (const auto& p : lay.params) {
    EXPECT_EQ(p.offset % 16, 0) << p.name;  // 64-byte aligned
    EXPECT_GE(p.offset, end) << p.name;
    end = p.offset + p.numel;
    counted += p.numel;
    EXPECT_EQ(p.weight_decay, p.shape.size() == 2) << p.name;
  }
  EXPECT_LE(end, lay.total);
  EXPECT_EQ(counted, small_config().num_parameters());
}

TEST(GPT, Gpt2InitializationStatistics) {
  loom::ModelConfig cfg{512, 4, 4, 128, 64};
  auto model_owner = loom::make_model(cfg, 1, 8);
  loom::StageModule& model = *model_owner;
  model.init_parameters(1);
  for (size_t i = 0; i < model.layout().params.size(); i++) {
    const auto& p = model.layout().params[i];
    const float* x = model.param(int(i));
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < p.numel; j++) sum += x[j], sq += double(x[j]) * x[j];
    double mean = sum / p.numel, std = std::sqrt(sq / p.numel - mean * mean);
    if (p.init == loom::Init::Normal) {
      double want = p.name.find("c_proj.weight") != std::string::npos ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
      EXPECT_NEAR(std, want, 0.05 * want) << p.name;
      EXPECT_NEAR(mean, 0.0, 0.05 * want) << p.name;
    } else {
      EXPECT_EQ(std, 0.0) << p.name;
      EXPECT_EQ(mean, p.init == loom::Init::Ones ? 1.0 : 0.0) << p.name;
    }
  }
}

TEST(GPT, InitDependsOnlyOnSeedAndName) {
  // Two models with different depths share the tensors they both have.
  auto a_owner = loom::make_model(loom::ModelConfig{64, 2, 2, 32, 16}, 1, 4);
  auto b_owner = loom::make_model(loom::ModelConfig{64, 3, 2, 32, 16}, 2, 8);
  loom::StageModule &a = *a_owner, &b = *b_owner;
  a.init_parameters(5);
  b.init_parameters(5);
  for (const char* name : {"wte.weight", "wpe.weight", "h.1.attn.c_attn.weight", "h.0.mlp.c_fc.weight"}) {
    const auto* pa = a.layout().find(name);
    const auto* pb = b.layout().find(name);
    ASSERT_TRUE(pa && pb) << name;
    EXPECT_EQ(0, std::memcmp(a.params() + pa->offset, b.params() + pb->offset, pa->numel * 4)) << name;
  }
}

TEST(GPT, IgnoredTargetsDoNotCount) {
  loom::ModelConfig cfg = small_config();
  auto model_owner = loom::make_model(cfg, 2, 8);
  loom::StageModule& model = *model_owner;
  model.init_parameters(3);
  std::vector<int32_t> tokens(16), targets(16), masked(16);
  for (int i = 0; i < 16; i++) tokens[i] = (i * 7) % 64, targets[i] = (i * 5 + 1) % 64;
  masked = targets;
  for (int i = 8; i < 16; i++) masked[i] = -1;
  float full = model.forward(tokens.data(), targets.data(), 2, 8);
  float half = model.forward(tokens.data(), masked.data(), 2, 8);
  float first = model.forward(tokens.data(), targets.data(), 1, 8);  // the first row alone
  EXPECT_NE(full, half);
  EXPECT_FLOAT_EQ(half, first);
}

// A large vocabulary's head runs in chunks of rows (fp32: 2048 x 4100 logits
// are over 2^23; bf16 counts 2 bytes a logit, so 4096 x 4100 are needed):
// loss and gradients equal those of the same four sequences run one at a
// time (each in one chunk), within fp32 summation order (bf16 measured 5e-8
// of the gradient's norm, 1.5e-7 widened on AVX2).
TEST(GPT, ChunkedHeadMatchesWholeSequences) {
  for (const loom::ComputePrecision p : {loom::ComputePrecision::fp32, loom::ComputePrecision::bf16})
    for (bool llama : {false, true}) {
      loom::ModelConfig cfg{4100, 1, 2, 32, 1024};
      if (llama) cfg.family = loom::ModelFamily::llama, cfg.ffn_hidden = 64;
      const bool fp32 = p == loom::ComputePrecision::fp32;
      const int B = 4, T = fp32 ? 512 : 1024, N = B * T;
      std::vector<int32_t> tokens(N), targets(N);
      for (int i = 0; i < N; i++) tokens[i] = (i * 7919) % 4100, targets[i] = (i * 104729 + 3) % 4100;
      auto model = [&](int b) {
        return loom::make_stage_module(cfg, loom::ModelShard{}, loom::TensorParallel{}, b, T,
                                       loom::StageBuffers{{}, {p}});
      };
      auto batch = model(B);
      batch->init_parameters(5);
      batch->zero_grads();
      const float loss = batch->forward_backward(tokens.data(), targets.data(), B, T);
      EXPECT_THROW((void)batch->logits(), std::exception) << "only the last chunk's logits are kept";
      auto one = model(1);
      one->init_parameters(5);
      one->zero_grads();
      double sum = 0;
      for (int b = 0; b < B; b++)
        sum += one->forward_backward(tokens.data() + b * T, targets.data() + b * T, 1, T, 1.f / B);
      const double tol = 1e-5;
      EXPECT_NEAR(loss, sum / B, tol * loss);
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < batch->params_size(); i++) {
        const double a = batch->grads()[i], g = one->grads()[i];
        diff += (a - g) * (a - g), norm += g * g;
      }
      EXPECT_LE(std::sqrt(diff), tol * std::sqrt(norm)) << (llama ? "llama " : "gpt2 ") << (fp32 ? "fp32" : "bf16");
    }
}

}  // namespace

namespace {

loom::ModelConfig small_llama(int tie = -1) {
  loom::ModelConfig c{64, 3, 4, 32, 16};
  c.family = loom::ModelFamily::llama, c.n_kv_head = 2, c.ffn_hidden = 48, c.tie_embeddings = tie;
  return c;
}

// LLaMA's layout: Hugging Face's names (q/k/v and gate/up fused by rows), no
// biases, an untied head first in backward order and the embedding last; the
// count matches num_parameters(); tied: no lm_head.
TEST(LlamaLayout, NamesShapesAndParameterCount) {
  const loom::ModelConfig cfg = small_llama();
  const auto lay = loom::ParamLayout::for_model(cfg);
  ASSERT_EQ(lay.params.front().name, "lm_head.weight");
  EXPECT_EQ(lay.params[1].name, "model.norm.weight");
  EXPECT_EQ(lay.params[2].name, "model.layers.2.mlp.down_proj.weight");
  EXPECT_EQ(lay.params.back().name, "model.embed_tokens.weight");
  // q: 4 heads x 8, k and v: 2 heads x 8 each.
  EXPECT_EQ(lay.find("model.layers.0.self_attn.qkv_proj.weight")->shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(lay.find("model.layers.0.mlp.gate_up_proj.weight")->shape, (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(lay.find("model.layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{32, 48}));
  int64_t counted = 0;
  for (const auto& p : lay.params) {
    EXPECT_FALSE(p.name.ends_with(".bias")) << p.name;
    EXPECT_EQ(p.sequence_partial, p.shape.size() == 1) << p.name;  // the norms
    EXPECT_FALSE(p.tied_across_stages) << p.name;
    counted += p.numel;
  }
  EXPECT_EQ(counted, cfg.num_parameters());
  const auto tied = loom::ParamLayout::for_model(small_llama(1));
  EXPECT_EQ(tied.find("lm_head.weight"), nullptr);
  EXPECT_EQ(tied.params.size() + 1, lay.params.size());
  EXPECT_EQ(small_llama(1).num_parameters() + 64 * 32, cfg.num_parameters());
  // Pipeline: the untied head and the embedding are separate tensors on the
  // last and first stages (nothing to sync); a tied table is held by both.
  loom::ModelShard first{0, 1, false, 0, 1, true, false}, last{0, 1, false, 1, 3, false, true};
  EXPECT_TRUE(loom::ParamLayout::for_model(cfg, first).tied_across_stages().empty());
  EXPECT_TRUE(loom::ParamLayout::for_model(cfg, last).tied_across_stages().empty());
  EXPECT_EQ(loom::ParamLayout::for_model(small_llama(1), last).tied_across_stages().size(), 1u);
}

// The multiple_of rule of Meta's LLaMA: 8/3 d_model rounded up.
TEST(LlamaConfig, FfnWidthRule) {
  loom::ModelConfig c{32000, 32, 32, 4096, 4096};
  c.family = loom::ModelFamily::llama;
  EXPECT_EQ(c.ffn(), 11008);  // LLaMA-7B
  c.ffn_hidden = 1000;
  EXPECT_EQ(c.ffn(), 1000);
  EXPECT_EQ(loom::ModelConfig{}.ffn(), 4 * 256);  // GPT-2
}

TEST(LlamaModel, InitDependsOnlyOnSeedAndNameAndLossStartsNearUniform) {
  auto model = loom::make_model(small_llama(), 2, 16);
  model->init_parameters(3);
  std::vector<int32_t> tokens(32), targets(32);
  for (int i = 0; i < 32; i++) tokens[size_t(i)] = (i * 7) % 64, targets[size_t(i)] = (i * 13 + 1) % 64;
  const float loss = model->forward(tokens.data(), targets.data(), 2, 16);
  EXPECT_NEAR(loss, std::log(64.f), 0.1f);
  auto again = loom::make_model(small_llama(), 1, 8);
  again->init_parameters(3);
  EXPECT_EQ(0, std::memcmp(again->params(), model->params(), size_t(model->layout().total) * sizeof(float)));
}

}  // namespace
