// The model section a checkpoint records, for both families: LLaMA's fields
// round-trip (rope_theta and norm_eps as reals), a manifest written before
// LLaMA (no family) reads as GPT-2, and a run of one family refuses a
// checkpoint of the other, naming both.
#include <gtest/gtest.h>

#include "checkpoint/manifest.h"
#include "checkpoint/model_fields.h"
#include "core/check.h"

namespace loom {
namespace {

ModelConfig llama() {
  ModelConfig c{300, 3, 8, 64, 32};
  c.family = ModelFamily::llama, c.n_kv_head = 2, c.ffn_hidden = 96, c.rope_theta = 500000, c.norm_eps = 1e-6;
  return c;
}

TEST(ModelFields, LlamaRoundTrips) {
  const ModelConfig c = llama();
  const ModelConfig back = model_config_from_fields(model_fields(c), model_real_fields(c), "test");
  EXPECT_TRUE(back.is_llama());
  EXPECT_EQ(back.kv_heads(), 2);
  EXPECT_EQ(back.ffn(), 96);
  EXPECT_FALSE(back.tied());
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.norm_eps, 1e-6);
  EXPECT_EQ(model_fields(back), model_fields(c));
  // Without its reals a LLaMA section is incomplete, and says which field.
  try {
    model_config_from_fields(model_fields(c), {}, "ckpt/manifest.json");
    ADD_FAILURE() << "accepted without rope_theta";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_theta"), std::string::npos) << e.what();
  }
}

TEST(ModelFields, OldManifestIsGpt2) {
  auto fields = model_fields(ModelConfig{300, 2, 4, 64, 32});
  fields.erase("family");
  EXPECT_FALSE(model_config_from_fields(fields, {}, "old").is_llama());
  CheckpointManifest m;
  m.model = fields;
  EXPECT_NO_THROW(check_model_matches(m, model_fields(ModelConfig{300, 2, 4, 64, 32}), "old"));
}

TEST(ModelFields, TheOtherFamilyIsRefusedBothWays) {
  CheckpointManifest gpt2, ll;
  gpt2.model = model_fields(ModelConfig{300, 3, 8, 64, 32});
  ll.model = model_fields(llama());
  auto message = [](const CheckpointManifest& m, const ModelConfig& run) {
    try {
      check_model_matches(m, model_fields(run), "ckpt/manifest.json");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(gpt2, llama()).find("is a GPT-2 model; this run's model.family is \"llama\""), std::string::npos)
      << message(gpt2, llama());
  EXPECT_NE(message(ll, ModelConfig{300, 3, 8, 64, 32}).find("is a LLaMA model; this run's model.family is \"gpt2\""),
            std::string::npos);
  // Same family, other kv heads: named as a model field.
  ModelConfig other = llama();
  other.n_kv_head = 4;
  EXPECT_NE(message(ll, other).find("model.n_kv_head"), std::string::npos) << message(ll, other);
}

}  // namespace
}  // namespace loom
