#include <gtest/gtest.h>

#include <fstream>

#include "config/run_config.h"
#include "core/check.h"

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = std::string(LOOM_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The error message of a UserError thrown by load_run_config ("" if none).
std::string error_of(const std::string& path, std::vector<std::string> overrides = {}) {
  try {
    loom::load_run_config(path, overrides);
  } catch (const loom::UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultFileEqualsBuiltInDefaults) {
  loom::RunConfig file = loom::load_run_config(LOOM_SOURCE_DIR "/configs/default.toml", {});
  loom::RunConfig builtin = loom::load_run_config("", {});
  EXPECT_EQ(file.to_toml(), builtin.to_toml());
}

TEST(Config, EveryBundledConfigLoads) {
  for (const char* name : {"default", "tiny", "gpt2-124m", "llama-tiny", "llama-small"})
    EXPECT_NO_THROW(loom::load_run_config(std::string(LOOM_SOURCE_DIR "/configs/") + name + ".toml", {})) << name;
  // The fine-tuning examples name a checkpoint folder the user has: on a LLaMA shape instead.
  const auto lora = loom::load_run_config(LOOM_SOURCE_DIR "/configs/lora-llama3.toml",
                                          {"train.init_from=\"\"", "model.family=\"llama\"", "model.d_model=256"});
  EXPECT_EQ(lora.model.lora.rank, 16);
  EXPECT_EQ(lora.model.lora.targets.size(), 7u);
}

TEST(Config, OverridesApply) {
  auto c = loom::load_run_config("", {"train.lr=3e-4", "model.n_layer=2", "data.path=foo.txt", "train.steps=7"});
  EXPECT_FLOAT_EQ(c.train.lr, 3e-4f);
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.data.path, "foo.txt");
  EXPECT_EQ(c.train.steps, 7);
}

TEST(Config, UnknownFieldIsNamed) {
  std::string p = write_temp("unknown.toml", "[train]\nlrr = 1.0\n");
  EXPECT_NE(error_of(p).find("unknown config field 'train.lrr'"), std::string::npos) << error_of(p);
  EXPECT_NE(error_of(p).find(p), std::string::npos);
  EXPECT_NE(error_of("", {"model.depth=3"}).find("'model.depth'"), std::string::npos);
}

// A run name becomes a folder name and appears in logs and reports.
TEST(Config, RunNameWithControlCharactersIsRefused) {
  for (const char* name : {"a\\nb", "tab\\there", "bell\\u0007", "del\\u007f"}) {
    const std::string e = error_of("", {std::string("train.run_name=\"") + name + "\""});
    EXPECT_NE(e.find("train.run_name"), std::string::npos) << name << ": " << e;
    EXPECT_NE(e.find("control characters"), std::string::npos) << name << ": " << e;
  }
  EXPECT_EQ(error_of("", {"train.run_name=\"ok-name_1 (x)\""}), "");
}

// train.freeze: shell patterns of global tensor names. A pattern that
// matches nothing (a typo would otherwise train everything), freezing every
// tensor, an empty pattern or a value that is not a list of strings are
// refused naming the field; a good list round-trips through to_toml().
TEST(Config, FreezePatternsAreChecked) {
  auto e = error_of("", {"train.freeze=[\"wte.weight\", \"h.99.*\"]"});
  EXPECT_NE(e.find("train.freeze"), std::string::npos) << e;
  EXPECT_NE(e.find("h.99.*"), std::string::npos) << e;
  e = error_of("", {"train.freeze=[\"*\"]"});
  EXPECT_NE(e.find("train.freeze"), std::string::npos) << e;
  EXPECT_NE(e.find("every tensor"), std::string::npos) << e;
  EXPECT_NE(error_of("", {"train.freeze=[\"\"]"}).find("train.freeze"), std::string::npos);
  EXPECT_NE(error_of("", {"train.freeze=\"wte.weight\""}).find("an array of strings"), std::string::npos);
  EXPECT_NE(error_of("", {"train.freeze=[1, 2]"}).find("an array of strings"), std::string::npos);
  const auto c = loom::load_run_config("", {"train.freeze=[\"wte.weight\", \"h.[0-5].*\"]"});
  ASSERT_EQ(c.train.freeze.size(), 2u);
  EXPECT_EQ(c.train.freeze[1], "h.[0-5].*");
  const std::string path = write_temp("freeze_roundtrip.toml", c.to_toml());
  EXPECT_EQ(loom::load_run_config(path, {}).to_toml(), c.to_toml());
  // LLaMA's names.
  EXPECT_EQ(error_of(LOOM_SOURCE_DIR "/configs/llama-tiny.toml",
                     {"train.freeze=[\"model.embed_tokens.weight\", \"model.layers.0.*\"]"}),
            "");
}

// ZB-V is two chunks per stage: the schedule alone implies them.
TEST(Config, ZbvImpliesTwoChunksPerStage) {
  EXPECT_EQ(loom::load_run_config("", {"parallel.schedule=\"zb-v\""}).parallel.virtual_stages, 2);
  EXPECT_EQ(loom::load_run_config("", {"parallel.schedule=\"zb-v\"", "parallel.virtual_stages=2"})
                .parallel.virtual_stages,
            2);
  EXPECT_NE(error_of("", {"parallel.schedule=\"zb-v\"", "parallel.virtual_stages=3"}).find("parallel.virtual_stages"),
            std::string::npos);
  EXPECT_EQ(loom::load_run_config("", {"parallel.schedule=\"1f1b\""}).parallel.virtual_stages, 1);
}

TEST(Config, WrongTypeIsNamed) {
  std::string p = write_temp("wrongtype.toml", "[model]\nn_layer = \"four\"\n");
  EXPECT_NE(error_of(p).find("'model.n_layer'"), std::string::npos) << error_of(p);
  EXPECT_NE(error_of(p).find("integer"), std::string::npos);
}

TEST(Config, OutOfRangeIsNamed) {
  EXPECT_NE(error_of("", {"train.lr=-1"}).find("'train.lr'"), std::string::npos);
  EXPECT_NE(error_of("", {"model.n_layer=0"}).find("'model.n_layer'"), std::string::npos);
  EXPECT_NE(error_of("", {"train.beta2=1.5"}).find("'train.beta2'"), std::string::npos);
  EXPECT_NE(error_of("", {"model.n_layer=99999999999"}).find("'model.n_layer'"), std::string::npos);
  EXPECT_NE(error_of("", {"model.vocab_size=100"}).find("'model.vocab_size'"), std::string::npos);
}

// Context parallelism (issue 21): two equal chunks per cp rank, and the
// ring runs the tiled attention.
TEST(Config, ContextParallelFieldsAreChecked) {
  std::string e = error_of("", {"parallel.cp=3", "model.seq_len=256"});
  EXPECT_NE(e.find("'model.seq_len'"), std::string::npos) << e;
  EXPECT_NE(e.find("2 x parallel.cp = 6"), std::string::npos) << e;
  EXPECT_NE(error_of("", {"parallel.cp=0"}).find("'parallel.cp'"), std::string::npos);
  e = error_of("", {"parallel.cp=2", "model.attention=\"materialized\""});
  EXPECT_NE(e.find("'model.attention'"), std::string::npos) << e;
  EXPECT_NE(error_of("", {"model.attention=\"flash\""}).find("'model.attention'"), std::string::npos);
}

TEST(Config, HeadsMustDivideWidth) {
  std::string e = error_of("", {"model.d_model=130", "model.n_head=4"});
  EXPECT_NE(e.find("'model.d_model'"), std::string::npos) << e;
  EXPECT_NE(e.find("'model.n_head'"), std::string::npos) << e;
}

// LLaMA's fields: read, written back by to_toml, and checked.
TEST(Config, LlamaFieldsRoundTrip) {
  const auto c = loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml", {"model.rope_theta=500000"});
  EXPECT_TRUE(c.model.is_llama());
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_FALSE(c.model.tied());
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  const std::string path = write_temp("llama_roundtrip.toml", c.to_toml());
  EXPECT_EQ(loom::load_run_config(path, {}).to_toml(), c.to_toml());
  EXPECT_TRUE(loom::load_run_config("", {"model.family=\"llama\"", "model.tie_embeddings=true"}).model.tied());
}

TEST(Config, LlamaBadFieldsAreNamed) {
  const std::string llama = "model.family=\"llama\"";
  auto expect = [&](std::vector<std::string> sets, const char* field) {
    const std::string e = error_of("", sets);
    EXPECT_NE(e.find(field), std::string::npos) << e;
  };
  expect({"model.family=\"llamma\""}, "'model.family'");
  expect({llama, "model.n_head=8", "model.n_kv_head=3"}, "'model.n_kv_head'");    // 8 % 3
  expect({llama, "model.d_model=72", "model.n_head=8"}, "head dimension");       // 9: odd, rotary needs pairs
  expect({llama, "model.ffn_hidden=-4"}, "'model.ffn_hidden'");
  expect({llama, "model.norm_eps=0"}, "'model.norm_eps'");
  expect({llama, "model.rope_theta=0.5"}, "'model.rope_theta'");
  expect({"model.tie_embeddings=1"}, "'model.tie_embeddings'");                   // not a boolean
  // GPT-2 refuses LLaMA's fields rather than training something else.
  expect({"model.n_kv_head=2"}, "'model.n_kv_head'");
  expect({"model.ffn_hidden=100"}, "'model.ffn_hidden'");
  expect({"model.tie_embeddings=false"}, "'model.tie_embeddings'");
}

TEST(Config, SyntaxErrorNamesFileAndLine) {
  std::string p = write_temp("syntax.toml", "[model]\nn_layer = = 3\n");
  std::string e = error_of(p);
  EXPECT_NE(e.find(p + ":2:"), std::string::npos) << e;
}

}  // namespace

namespace {

// [lora] (issue 39): read, written back by to_toml, and every bad value
// refused naming its field.
TEST(Config, LoraFieldsRoundTripAndBadOnesAreNamed) {
  const std::vector<std::string> lora = {"lora.rank=8", "lora.alpha=16", "lora.targets=[\"c_attn\", \"mlp.c_proj\"]",
                                         "lora.bias=\"all\"", "lora.seed=3"};
  const auto c = loom::load_run_config("", lora);
  EXPECT_EQ(c.model.lora.rank, 8);
  EXPECT_EQ(c.model.lora.scale(), 2.f);
  EXPECT_TRUE(c.model.lora.train_biases);
  EXPECT_TRUE(c.model.lora.targets_module("transformer.h.3.mlp.c_proj"));
  EXPECT_FALSE(c.model.lora.targets_module("transformer.h.3.attn.c_proj"));
  const std::string path = write_temp("lora_roundtrip.toml", c.to_toml());
  EXPECT_EQ(loom::load_run_config(path, {}).model.lora, c.model.lora);
  EXPECT_FALSE(loom::load_run_config("", {}).model.lora.enabled());

  auto expect = [&](std::vector<std::string> sets, const char* field) {
    const std::string e = error_of("", sets);
    EXPECT_NE(e.find(field), std::string::npos) << e;
  };
  const std::string targets = "lora.targets=[\"c_attn\"]";
  expect({"lora.rank=0", targets}, "'lora.rank'");
  expect({"lora.rank=-2", targets}, "'lora.rank'");
  expect({"lora.rank=300", targets}, "'lora.rank'");  // above d_model 256
  expect({"lora.rank=4", "lora.alpha=0", targets}, "'lora.alpha'");
  expect({"lora.rank=4", "lora.targets=[\"q_proj\"]"}, "'lora.targets'");  // a LLaMA name on GPT-2
  expect({"lora.rank=4", "lora.targets=[]"}, "'lora.targets'");
  expect({"lora.rank=4", targets, "lora.dropout=0.1"}, "'lora.dropout'");
  expect({"lora.rank=4", targets, "lora.bias=\"lora_only\""}, "'lora.bias'");
  expect({"lora.rank=4", targets, "lora.seed=-1"}, "'lora.seed'");
  expect({"lora.rnak=4"}, "'lora.rnak'");
  expect({"train.init_adapter=\"somewhere\""}, "'train.init_adapter'");  // without [lora]
  // LLaMA: its own names; the rank bound by the smaller side (k/v: kv heads x head_dim).
  const std::string llama = LOOM_SOURCE_DIR "/configs/llama-tiny.toml";
  EXPECT_EQ(loom::load_run_config(llama, {"lora.rank=4", "lora.targets=[\"q_proj\", \"down_proj\"]"}).model.lora.rank, 4);
  const std::string e = error_of(llama, {"lora.rank=40", "lora.targets=[\"k_proj\"]"});
  EXPECT_NE(e.find("'lora.rank'"), std::string::npos) << e;  // k_proj is 32 x 64
}

}  // namespace
