// Parameter groups (model/param_groups.h): every tensor in exactly one
// group, train.freeze's patterns, and the groups a model declares.
#include <gtest/gtest.h>

#include "core/check.h"
#include "model/param_groups.h"

namespace {

loom::ModelConfig gpt2() { return loom::ModelConfig{512, 4, 4, 128, 64}; }

TEST(ParamGroups, OneTrainedGroupOverTheDataGroupWithoutFreeze) {
  const auto groups = loom::param_groups(gpt2(), {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_FALSE(groups[0].frozen);
  EXPECT_EQ(groups[0].ranks, loom::GroupKind::data);
  for (int g : loom::group_of_tensors(groups, loom::ParamLayout::for_model(gpt2()))) EXPECT_EQ(g, 0);
}

TEST(ParamGroups, FreezeMovesTheMatchedTensorsToAFrozenGroup) {
  const auto groups = loom::param_groups(gpt2(), {"wte.weight", "h.[0-1].*"});
  ASSERT_EQ(groups.size(), 2u);
  const auto lay = loom::ParamLayout::for_model(gpt2());
  const auto of = loom::group_of_tensors(groups, lay);
  int frozen = 0;
  for (size_t i = 0; i < of.size(); i++) {
    const std::string& name = lay.params[i].name;
    const bool want = name == "wte.weight" || name.rfind("h.0.", 0) == 0 || name.rfind("h.1.", 0) == 0;
    EXPECT_EQ(groups[size_t(of[i])].frozen, want) << name;
    frozen += want;
  }
  const loom::FrozenShare share = loom::frozen_share(gpt2(), {"wte.weight", "h.[0-1].*"});
  EXPECT_EQ(share.tensors, frozen);
  EXPECT_GT(share.frozen, 0);
  EXPECT_LT(share.frozen, share.total);
}

TEST(ParamGroups, ATensorInNoGroupOrInTwoIsAnInternalError) {
  const auto lay = loom::ParamLayout::for_model(gpt2());
  std::vector<loom::ParamGroupSpec> none = {{"odd", false, loom::GroupKind::data,
                                             [](const std::string& n) { return n == "wte.weight"; }}};
  try {
    loom::group_of_tensors(none, lay);
    FAIL() << "a tensor in no group was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("in no parameter group"), std::string::npos) << e.what();
  }
  std::vector<loom::ParamGroupSpec> two = {
      {"a", false, loom::GroupKind::data, [](const std::string&) { return true; }},
      {"b", true, loom::GroupKind::data, [](const std::string& n) { return n == "wte.weight"; }}};
  try {
    loom::group_of_tensors(two, lay);
    FAIL() << "a tensor in two groups was accepted";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("wte.weight is in two parameter groups"), std::string::npos) << e.what();
  }
}

TEST(ParamGroups, FreezeProblemsAreNamed) {
  EXPECT_EQ(loom::freeze_problem(gpt2(), {"wte.weight"}), "");
  EXPECT_NE(loom::freeze_problem(gpt2(), {"h.9.*"}).find("matches no tensor"), std::string::npos);
  EXPECT_NE(loom::freeze_problem(gpt2(), {"*"}).find("every tensor"), std::string::npos);
  EXPECT_NE(loom::freeze_problem(gpt2(), {""}).find("empty"), std::string::npos);
  EXPECT_TRUE(loom::tensor_name_matches("h.[0-5].*", "h.3.attn.c_attn.weight"));
  EXPECT_FALSE(loom::tensor_name_matches("h.[0-5].*", "h.13.attn.c_attn.weight"));
}

}  // namespace

namespace {

// LoRA (issue 39): the adapters are the trained group, the base frozen (with
// bias "all" the biases trained too); their count is lora_parameters'; a
// tp split gives each rank B's rows of a column product and A's columns of a
// row product, the whole factor marked tp_partial.
TEST(ParamGroups, LoraTrainsTheAdaptersAloneOnAFrozenBase) {
  for (const bool llama : {false, true}) {
    loom::ModelConfig cfg = gpt2();
    if (llama) cfg.family = loom::ModelFamily::llama, cfg.n_kv_head = 2;
    cfg.lora.rank = 8;
    cfg.lora.targets = llama ? std::vector<std::string>{"q_proj", "v_proj", "down_proj"}
                             : std::vector<std::string>{"c_attn", "mlp.c_proj"};
    for (const bool biases : {false, true}) {
      cfg.lora.train_biases = biases;
      const auto lay = loom::ParamLayout::for_model(cfg);
      const auto groups = loom::param_groups(cfg, {});
      const auto of = loom::group_of_tensors(groups, lay);
      int64_t adapters = 0;
      for (size_t i = 0; i < of.size(); i++) {
        const std::string& name = lay.params[i].name;
        const bool trained = loom::is_lora_tensor(name) || (biases && name.ends_with(".bias"));
        EXPECT_EQ(groups[size_t(of[i])].frozen, !trained) << name;
        if (loom::is_lora_tensor(name)) adapters += lay.params[i].numel;
      }
      EXPECT_EQ(adapters, loom::lora_parameters(cfg));
      EXPECT_EQ(adapters, int64_t(cfg.n_layer) * 8 * (llama ? (128 + 128) + (128 + 64) + (cfg.ffn() + 128)
                                                             : (128 + 384) + (512 + 128)));
    }
    // tp = 2: this rank's pieces.
    loom::ModelShard shard;
    shard.tp_size = 2, shard.tp_rank = 1;
    const auto half = loom::ParamLayout::for_model(cfg, shard);
    const std::string col = llama ? "model.layers.0.self_attn.q_proj" : "h.0.attn.c_attn";
    const std::string row = llama ? "model.layers.0.mlp.down_proj" : "h.0.mlp.c_proj";
    EXPECT_EQ(half.find(col + ".lora_B.weight")->local_shape[0], llama ? 64 : 192);
    EXPECT_TRUE(half.find(col + ".lora_A.weight")->tp_partial);
    EXPECT_FALSE(half.find(col + ".lora_B.weight")->tp_partial);
    EXPECT_EQ(half.find(row + ".lora_A.weight")->local_shape[1], cfg.ffn() / 2);
    EXPECT_TRUE(half.find(row + ".lora_B.weight")->tp_partial);
  }
}

}  // namespace
