#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/gpt.h"
#include "model/param_layout.h"

namespace {

loom::GPTConfig small_config() { return loom::GPTConfig{64, 3, 2, 32, 16}; }

TEST(ParamLayout, OffsetsAlignedDisjointAndInBackwardOrder) {
  auto lay = loom::ParamLayout::gpt2(small_config());
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
  loom::GPTConfig cfg{512, 4, 4, 128, 64};
  loom::GPT model(cfg, 1, 8);
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
  loom::GPT a(loom::GPTConfig{64, 2, 2, 32, 16}, 1, 4), b(loom::GPTConfig{64, 3, 2, 32, 16}, 2, 8);
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
  loom::GPTConfig cfg = small_config();
  loom::GPT model(cfg, 2, 8);
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

}  // namespace
