// `loom export --format hf` without transformers: HF's tensor names, the
// LLaMA's fused projections cut by rows, config.json's fields and the special
// tokens taken from the run's tokenizer. (hf_interop_test.cpp loads exports
// with transformers itself.)
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/model_fields.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "data/tokenizer.h"
#include "model/stage_module.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_loom_cmd;
using test::slurp;

struct NamedShape {
  std::string name;
  std::vector<int64_t> shape;
};

// loom's LLaMA tensors, written out from the naming contract (not taken
// from the model code, which the test checks against it).
std::vector<NamedShape> llama_tensors(const ModelConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.ffn(), hd = c.head_dim();
  std::vector<NamedShape> t = {{"model.embed_tokens.weight", {V, C}}};
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {C}});
    t.push_back({p + "self_attn.qkv_proj.weight", {(c.n_head + 2 * c.kv_heads()) * hd, C}});
    t.push_back({p + "self_attn.o_proj.weight", {C, c.n_head * hd}});
    t.push_back({p + "post_attention_layernorm.weight", {C}});
    t.push_back({p + "mlp.gate_up_proj.weight", {2 * F, C}});
    t.push_back({p + "mlp.down_proj.weight", {C, F}});
  }
  t.push_back({"model.norm.weight", {C}});
  if (!c.tied()) t.push_back({"lm_head.weight", {V, C}});
  return t;
}

ModelConfig small_llama(bool tied) {
  ModelConfig c{400, 2, 4, 32, 16};  // vocab, layers, heads, d_model, seq_len
  c.family = ModelFamily::llama;
  c.n_kv_head = 2;
  c.ffn_hidden = 48;
  c.rope_theta = 50000.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = tied ? 1 : 0;
  c.validate();
  return c;
}

// Element j of the k-th tensor is k * 1e5 + j: every value names its place.
float value_at(size_t k, int64_t j) { return float(double(k) * 1e5 + double(j)); }

// A checkpoint of `tensors` (values as value_at), `config_toml` as its run's.
void save_tensors(const std::string& root, const ModelConfig& cfg, const std::vector<NamedShape>& tensors,
                  const std::string& config_toml) {
  std::vector<std::vector<float>> data(tensors.size());
  std::vector<CheckpointPiece> pieces;
  for (size_t k = 0; k < tensors.size(); k++) {
    data[k].resize(size_t(shape_numel(tensors[k].shape)));
    for (size_t j = 0; j < data[k].size(); j++) data[k][j] = value_at(k, int64_t(j));
    pieces.push_back({tensors[k].name, tensors[k].shape, {}, {}, 0, -1, data[k].data()});
  }
  CheckpointManifest m;
  m.step = 7;
  m.config_toml = config_toml;
  m.model = model_fields(cfg);
  m.model_real = model_real_fields(cfg);
  save_checkpoint(root, m, pieces, 1);
}

// A small SentencePiece model as `loom prepare` trains them (eos id 1).
std::string write_tokenizer(const std::string& dir) {
  const std::string text = slurp(LOOM_SOURCE_DIR "/data/sample/kjv.txt").substr(0, 60000);
  std::vector<std::string_view> lines;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t nl = std::min(rest.find('\n'), rest.size());
    if (nl > 0) lines.push_back(rest.substr(0, nl));
    rest.remove_prefix(std::min(rest.size(), nl + 1));
  }
  std::filesystem::create_directories(dir);
  test::spit(dir + "/tokenizer.model", Tokenizer::train(lines, 400, "kjv sample"));
  return dir + "/tokenizer.model";
}

std::string shards_config(const std::string& data_dir) {
  return "[model]\nfamily = \"llama\"\n[data]\nformat = \"shards\"\npath = \"" + data_dir + "\"\n";
}

nlohmann::json config_json(const std::string& export_dir) { return nlohmann::json::parse(slurp(export_dir + "/config.json")); }

TEST(HfExportLlama, TheNamingContractIsTheModelsLayout) {
  for (bool tied : {false, true}) {
    const ModelConfig cfg = small_llama(tied);
    std::unique_ptr<StageModule> model = make_model(cfg, 1, cfg.seq_len);
    std::vector<NamedShape> want = llama_tensors(cfg), have;
    for (const ParamSpec& p : model->layout().params) have.push_back({p.name, p.shape});
    auto by_name = [](const NamedShape& a, const NamedShape& b) { return a.name < b.name; };
    std::sort(want.begin(), want.end(), by_name);
    std::sort(have.begin(), have.end(), by_name);
    ASSERT_EQ(have.size(), want.size()) << "tied " << tied;
    for (size_t i = 0; i < want.size(); i++) {
      EXPECT_EQ(have[i].name, want[i].name);
      EXPECT_EQ(have[i].shape, want[i].shape) << want[i].name;
    }
  }
}

TEST(HfExportLlama, HfNamesFusedProjectionsCutByRowsAndConfig) {
  const std::string dir = ckpt_dir("hf-llama");
  const ModelConfig cfg = small_llama(false);
  const std::vector<NamedShape> tensors = llama_tensors(cfg);
  write_tokenizer(dir + "/data");
  save_tensors(dir + "/ckpt", cfg, tensors, shards_config(dir + "/data"));
  auto r = run_loom_cmd("export --checkpoint '" + dir + "/ckpt' --format hf --out '" + dir + "/hf' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step 7"), std::string::npos) << r.output;

  const int64_t C = 32, hd = 8, F = 48, L = 2;
  SafetensorsFile f = SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), size_t(3 + 9 * L));  // embed, norm, lm_head; 9 per layer
  // HF tensor, its shape, the loom tensor (index in `tensors`) and first row there.
  struct Want {
    std::string hf;
    std::vector<int64_t> shape;
    size_t loom;
    int64_t row0;
  };
  const std::string p = "model.layers.1.";
  const size_t l1 = 1 + 6;  // layer 1's first tensor
  const Want wants[] = {
      {"model.embed_tokens.weight", {400, C}, 0, 0},
      {p + "input_layernorm.weight", {C}, l1, 0},
      {p + "self_attn.q_proj.weight", {4 * hd, C}, l1 + 1, 0},
      {p + "self_attn.k_proj.weight", {2 * hd, C}, l1 + 1, 4 * hd},
      {p + "self_attn.v_proj.weight", {2 * hd, C}, l1 + 1, 6 * hd},
      {p + "self_attn.o_proj.weight", {C, 4 * hd}, l1 + 2, 0},
      {p + "post_attention_layernorm.weight", {C}, l1 + 3, 0},
      {p + "mlp.gate_proj.weight", {F, C}, l1 + 4, 0},
      {p + "mlp.up_proj.weight", {F, C}, l1 + 4, F},
      {p + "mlp.down_proj.weight", {C, F}, l1 + 5, 0},
      {"model.norm.weight", {C}, 1 + 6 * L, 0},
      {"lm_head.weight", {400, C}, 2 + 6 * L, 0},
  };
  for (const Want& w : wants) {
    const StTensorInfo* t = f.find(w.hf);
    ASSERT_NE(t, nullptr) << w.hf;
    EXPECT_EQ(t->dtype, StDType::F32);
    ASSERT_EQ(t->shape, w.shape) << w.hf;
    std::vector<float> v(size_t(shape_numel(w.shape)));
    f.read_floats(*t, 0, int64_t(v.size()), v.data());
    const int64_t cols = w.shape.size() > 1 ? w.shape[1] : 1;
    for (size_t j = 0; j < v.size(); j++)
      ASSERT_EQ(v[j], value_at(w.loom, w.row0 * cols + int64_t(j))) << w.hf << " element " << j;
  }
  EXPECT_EQ(f.find(p + "self_attn.qkv_proj.weight"), nullptr);
  EXPECT_EQ(f.find(p + "mlp.gate_up_proj.weight"), nullptr);

  const nlohmann::json c = config_json(dir + "/hf");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["vocab_size"], 400);
  EXPECT_EQ(c["hidden_size"], C);
  EXPECT_EQ(c["intermediate_size"], F);
  EXPECT_EQ(c["num_hidden_layers"], L);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["max_position_embeddings"], 16);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);
  EXPECT_EQ(c["rope_theta"], 50000.0);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["attention_bias"], false);
  EXPECT_EQ(c["torch_dtype"], "float32");
  EXPECT_EQ(c["dtype"], "float32");  // transformers 4.56+ and 5.x read this key
  // The run's tokenizer: end-of-text (1) both ends documents and starts them.
  EXPECT_EQ(c["bos_token_id"], 1);
  EXPECT_EQ(c["eos_token_id"], 1);
  EXPECT_EQ(c["loom_checkpoint_step"], 7);
}

TEST(HfExportLlama, TiedHeadIsNotStored) {
  const std::string dir = ckpt_dir("hf-llama-tied");
  const ModelConfig cfg = small_llama(true);
  save_tensors(dir + "/ckpt", cfg, llama_tensors(cfg), "[data]\nformat = \"bytes\"\npath = \"x.txt\"\n");
  auto r = run_loom_cmd("export --checkpoint '" + dir + "/ckpt' --out '" + dir + "/hf' --dtype bf16 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  SafetensorsFile f = SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_EQ(f.tensors().size(), size_t(2 + 9 * cfg.n_layer));
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("model.layers.0.self_attn.k_proj.weight")->dtype, StDType::BF16);
  const nlohmann::json c = config_json(dir + "/hf");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["torch_dtype"], "bfloat16");
  EXPECT_EQ(c["dtype"], "bfloat16");
  EXPECT_TRUE(c["bos_token_id"].is_null());  // byte-level data: no special tokens
  EXPECT_TRUE(c["eos_token_id"].is_null());
}

TEST(HfExportLlama, AWrongShapeExitsTwoNamingTheTensor) {
  const std::string dir = ckpt_dir("hf-llama-bad");
  const ModelConfig cfg = small_llama(false);
  std::vector<NamedShape> tensors = llama_tensors(cfg);
  tensors[2].shape[0] -= 8;  // layer 0's qkv_proj one kv head short
  save_tensors(dir + "/ckpt", cfg, tensors, "");
  auto r = run_loom_cmd("export --checkpoint '" + dir + "/ckpt' --out '" + dir + "/hf' 2>&1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.layers.0.self_attn.qkv_proj.weight"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf/model.safetensors"));
}

// GPT-2's config.json has the special tokens too: the run's tokenizer's, a
// --tokenizer given, or null (with a warning when the run's is missing).
TEST(HfExportGpt2, SpecialTokensFromTheRunsTokenizer) {
  const std::string dir = ckpt_dir("hf-gpt2-tokens");
  const ModelConfig cfg{400, 1, 2, 32, 16};
  std::vector<NamedShape> tensors;
  std::unique_ptr<StageModule> model = make_model(cfg, 1, cfg.seq_len);
  for (const ParamSpec& p : model->layout().params) tensors.push_back({p.name, p.shape});
  const std::string tok = write_tokenizer(dir + "/data");
  save_tensors(dir + "/shards", cfg, tensors, shards_config(dir + "/data"));
  save_tensors(dir + "/bytes", cfg, tensors, "[data]\nformat = \"bytes\"\npath = \"x.txt\"\n");
  save_tensors(dir + "/gone", cfg, tensors, shards_config(dir + "/no-such-data"));

  auto exported = [&](const std::string& ckpt, const std::string& extra) {
    auto r = run_loom_cmd("export --checkpoint '" + dir + "/" + ckpt + "' --out '" + dir + "/hf-" + ckpt + "' " + extra +
                          " 2>&1");
    EXPECT_EQ(r.code, 0) << r.output;
    nlohmann::json c = config_json(dir + "/hf-" + ckpt);
    EXPECT_EQ(c["model_type"], "gpt2");
    return std::make_pair(c, r.output);
  };
  auto [shards, out1] = exported("shards", "");
  EXPECT_EQ(shards["bos_token_id"], 1);
  EXPECT_EQ(shards["eos_token_id"], 1);
  auto [bytes, out2] = exported("bytes", "");
  EXPECT_TRUE(bytes["bos_token_id"].is_null());
  EXPECT_TRUE(bytes["eos_token_id"].is_null());
  auto [gone, out3] = exported("gone", "");
  EXPECT_TRUE(gone["eos_token_id"].is_null());
  EXPECT_NE(out3.find("warning"), std::string::npos) << out3;
  EXPECT_NE(out3.find(dir + "/no-such-data/tokenizer.model"), std::string::npos) << out3;
  auto [given, out4] = exported("gone", "--tokenizer '" + tok + "'");
  EXPECT_EQ(given["eos_token_id"], 1);
  EXPECT_EQ(out4.find("warning"), std::string::npos) << out4;
}

}  // namespace
}  // namespace loom
