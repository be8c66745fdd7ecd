// Hugging Face checkpoints in (issue 36): train.init_from = "hf:DIR".
//
// Against transformers (tools/make_hf_checkpoint.py, the project's .venv;
// skipped without it unless LOOM_REQUIRE_HF_INTEROP=1): GPT2LMHeadModel
// (with and without the "transformer." prefix), LlamaForCausalLM (untied,
// sharded with an index; tied, stored in bf16; with Llama 3.1's rope
// scaling), MistralForCausalLM and Qwen2ForCausalLM built from a config with
// random weights and saved by save_pretrained; loom reads the folder into
// its model: logits within 1e-5 relative (Frobenius) of transformers' on the
// same tokens, the same greedy continuation; in bf16 compute, logits no
// further from transformers' fp32 ones than 2x PyTorch's own bf16 run of the
// same weights; import, a step that changes nothing, export: the same
// tensors bit for bit.
//
// Bad input (no Python needed: folders written here): unknown architecture,
// a config field loom does not understand or whose value changes the math,
// a missing or mis-shaped tensor, an I32 weight, a truncated file, an index
// naming a shard that does not hold the tensor: UserError naming the file
// and the field or tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/layout_pieces.h"
#include "checkpoint_test_util.h"
#include "config/run_config.h"
#include "core/check.h"
#include "model/hf_names.h"
#include "model/stage_module.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::run_command;

using test::hf_python;

#define SKIP_WITHOUT_TRANSFORMERS() SKIP_WITHOUT_HF_MODULE("transformers")

struct Reference {
  int B = 0, T = 0, V = 0;
  std::vector<int32_t> tokens, generated;
  std::vector<float> logits, logits_bf16;  // bf16: PyTorch's run of the same weights in bfloat16
};

Reference read_reference(const std::string& path) {
  const std::string bytes = test::slurp(path);
  Reference r;
  size_t at = 0;
  auto ints = [&](size_t n) {
    std::vector<int32_t> v(n);
    std::memcpy(v.data(), bytes.data() + at, n * 4), at += n * 4;
    return v;
  };
  const auto head = ints(3);
  r.B = head[0], r.T = head[1], r.V = head[2];
  r.tokens = ints(size_t(r.B) * r.T);
  r.logits.resize(size_t(r.B) * r.T * r.V);
  std::memcpy(r.logits.data(), bytes.data() + at, r.logits.size() * 4), at += r.logits.size() * 4;
  r.generated = ints(size_t(ints(1)[0]));
  if (bytes.size() >= at + r.logits.size() * 4) {
    r.logits_bf16.resize(r.logits.size());
    std::memcpy(r.logits_bf16.data(), bytes.data() + at, r.logits_bf16.size() * 4);
  }
  return r;
}

// A checkpoint made by transformers (arguments of make_hf_checkpoint.py).
std::string make_hf(const std::string& name, const std::string& args) {
  const std::string dir = ckpt_dir("hf-import-" + name);
  auto r = run_command("'" + hf_python() + "' '" LOOM_SOURCE_DIR "/tools/make_hf_checkpoint.py' " + args + " '" + dir +
                       "/hf' 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  return dir + "/hf";
}

RunConfig import_config(const std::string& hf, int seq_len) {
  return load_run_config("", {"train.init_from=\"hf:" + hf + "\"", "model.seq_len=" + std::to_string(seq_len)});
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, w = 0;
  for (size_t i = 0; i < want.size(); i++) d += std::pow(double(got[i]) - want[i], 2), w += double(want[i]) * want[i];
  return std::sqrt(d / w);
}

// loom's logits of the reference tokens and its greedy continuation of row
// 0's first four tokens, from the checkpoint read into one process.
void expect_agreement(const std::string& hf, const std::string& what) {
  SCOPED_TRACE(what);
  const Reference ref = read_reference(hf + "/reference.bin");
  const RunConfig cfg = import_config(hf, ref.T);
  ASSERT_EQ(cfg.model.vocab_size, ref.V);
  const std::unique_ptr<HfCheckpoint> ck = HfCheckpoint::open(hf, cfg.model);
  std::unique_ptr<StageModule> model = make_model(cfg.model, ref.B, ref.T);
  fill_from_checkpoint(*ck, model->layout(), model->params());
  std::vector<int32_t> none(ref.tokens.size(), -1);
  model->forward(ref.tokens.data(), none.data(), ref.B, ref.T);
  const int stride = model->vocab_slice().rows;
  std::vector<float> logits(ref.logits.size());
  for (int64_t row = 0; row < int64_t(ref.B) * ref.T; row++)
    std::copy_n(model->logits() + row * stride, ref.V, logits.begin() + row * ref.V);
  EXPECT_LE(relative_error(logits, ref.logits), 1e-5);
  // Greedy: the argmax of the last position, appended, again.
  std::vector<int32_t> seq(ref.tokens.begin(), ref.tokens.begin() + 4);
  for (size_t k = 0; k < ref.generated.size(); k++) {
    const int T = int(seq.size());
    std::vector<int32_t> targets(seq.size(), -1);
    model->forward(seq.data(), targets.data(), 1, T);
    const float* last = model->logits() + int64_t(T - 1) * stride;
    seq.push_back(int32_t(std::max_element(last, last + ref.V) - last));
  }
  EXPECT_EQ(std::vector<int32_t>(seq.begin() + 4, seq.end()), ref.generated);

  // bf16 compute: loom's logits move from the fp32 truth by about what
  // PyTorch's own bf16 run of the same weights moves them (the bound of the
  // mixed-precision tests: the type's own effect, with room for a different
  // order of sums).
  ASSERT_EQ(ref.logits_bf16.size(), ref.logits.size());
  auto bf16 = make_stage_module(cfg.model, ModelShard{}, TensorParallel{}, ref.B, ref.T,
                                StageBuffers{{}, {ComputePrecision::bf16}});
  fill_from_checkpoint(*ck, bf16->layout(), bf16->params());
  bf16->refresh_compute_weights();
  bf16->forward(ref.tokens.data(), none.data(), ref.B, ref.T);
  const int stride16 = bf16->vocab_slice().rows;
  const std::vector<float> all16 = bf16->logits_f32(int64_t(ref.B) * ref.T);
  std::vector<float> logits16(ref.logits.size());
  for (int64_t row = 0; row < int64_t(ref.B) * ref.T; row++)
    std::copy_n(all16.data() + row * stride16, ref.V, logits16.begin() + row * ref.V);
  const double ours = relative_error(logits16, ref.logits), torch = relative_error(ref.logits_bf16, ref.logits);
  std::printf("%s: bf16 logits %.3g from fp32 (PyTorch's own bf16 run: %.3g)\n", what.c_str(), ours, torch);
  EXPECT_GT(torch, 0);
  EXPECT_LE(ours, 2.0 * torch);
}

TEST(HfImport, Gpt2MatchesTransformers) {
  SKIP_WITHOUT_TRANSFORMERS();
  expect_agreement(make_hf("gpt2", "--arch gpt2"), "GPT2LMHeadModel");
  expect_agreement(make_hf("gpt2-noprefix", "--arch gpt2 --no-prefix"), "GPT-2 without transformer.");
}

TEST(HfImport, LlamaMatchesTransformers) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string sharded = make_hf("llama-sharded", "--arch llama --shard-kb 100");
  ASSERT_TRUE(std::filesystem::exists(sharded + "/model.safetensors.index.json"));
  expect_agreement(sharded, "LlamaForCausalLM, untied, sharded");
  expect_agreement(make_hf("llama-tied-bf16", "--arch llama --tied --dtype bfloat16"), "LLaMA tied, bf16");
}

// Llama 3.1's llama3 rope scaling (kept, blended and stretched pairs), and
// Qwen2 (q/k/v biases, tied; untied and bf16 too).
TEST(HfImport, Llama31RopeScalingAndQwen2MatchTransformers) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string llama31 = make_hf("llama31", "--arch llama31");
  const RunConfig cfg = import_config(llama31, 16);
  EXPECT_EQ(cfg.model.rope_scaling.kind, RopeScaling::Kind::llama3);
  EXPECT_EQ(cfg.model.rope_scaling.original_max_positions, 32);
  expect_agreement(llama31, "LlamaForCausalLM with llama3 rope scaling");
  const std::string qwen2 = make_hf("qwen2", "--arch qwen2 --tied");
  EXPECT_TRUE(import_config(qwen2, 16).model.qkv_bias);
  expect_agreement(qwen2, "Qwen2ForCausalLM, tied");
  expect_agreement(make_hf("qwen2-bf16", "--arch qwen2 --dtype bfloat16"), "Qwen2ForCausalLM, untied, bf16");
}

// Mistral: LLaMA's names and math, with a sliding window (32 here) that
// must cover the run's sequence (16 in the reference): longer is refused.
TEST(HfImport, MistralMatchesTransformersAndItsWindowIsChecked) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string hf = make_hf("mistral", "--arch mistral");
  expect_agreement(hf, "MistralForCausalLM");
  try {
    load_run_config("", {"train.init_from=\"hf:" + hf + "\"", "model.seq_len=64"});
    FAIL() << "a sequence longer than the sliding window was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window"), std::string::npos) << e.what();
  }
}

// Import, one step whose targets are all masked (it updates nothing),
// checkpoint, export:
// transformers' tensors come back bit for bit.
TEST(HfImport, ImportThenExportGivesBackTheSameTensors) {
  SKIP_WITHOUT_TRANSFORMERS();
  for (const char* args : {"--arch gpt2", "--arch llama", "--arch llama31", "--arch qwen2"}) {
    SCOPED_TRACE(args);
    const std::string hf = make_hf(std::string("roundtrip-") + (args + 7), args);
    const std::string dir = std::filesystem::path(hf).parent_path().string();
    RunConfig cfg = load_run_config(
        "", {"train.init_from=\"hf:" + hf + "\"", "model.seq_len=64",
             "train.steps=1", "train.batch_size=2", "train.checkpoint_every=1", "train.eval_every=0",
             "train.sample_tokens=0", "train.run_dir=\"\"", "runtime.threads=1",
             "train.checkpoint_dir=\"" + dir + "/ckpt\"", "data.format=\"bytes\"",
             "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
    auto one = ParallelContext::create_single();
    TrainOptions nothing;
    nothing.target_mask = [](int64_t, int, int) { return true; };
    train(cfg, *one, nullptr, nothing);
    const Checkpoint ckpt = Checkpoint::open(resolve_resume(dir + "/ckpt", "").dir);
    export_hf(ckpt, dir + "/back");
    const SafetensorsFile original = SafetensorsFile::open(hf + "/model.safetensors");
    const SafetensorsFile back = SafetensorsFile::open(dir + "/back/model.safetensors");
    int compared = 0;
    for (const auto& [name, info] : back.tensors()) {
      const StTensorInfo* o = original.find(name);
      ASSERT_NE(o, nullptr) << name;
      ASSERT_EQ(o->shape, info.shape) << name;
      EXPECT_EQ(0, std::memcmp(original.raw(*o), back.raw(info), info.end - info.begin)) << name;
      compared++;
    }
    int parts = 0;
    for (const HfTensorMap& m : hf_tensor_map(cfg.model)) parts += int(m.parts.size());
    EXPECT_EQ(compared, parts);
    EXPECT_EQ(compared, int(original.tensors().size()));
    // The exported config.json describes the same model (Qwen2ForCausalLM
    // for q/k/v biases, the rope scaling written back).
    const HfModelConfig again = read_hf_config(dir + "/back");
    EXPECT_EQ(again.architecture, read_hf_config(hf).architecture);
    EXPECT_EQ(again.model.qkv_bias, cfg.model.qkv_bias);
    EXPECT_EQ(again.model.rope_scaling, cfg.model.rope_scaling);
    EXPECT_EQ(again.model.rope_theta, cfg.model.rope_theta);
  }
}

// --- Bad input: folders written here. ---

const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 300, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
  "hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false, "pretraining_tp": 1,
  "torch_dtype": "float32", "transformers_version": "4.40.2"})";

// A LLaMA checkpoint of zeros in HF's names; `edit` may change the entries.
std::string write_llama(const std::string& name, const std::string& config = kLlamaConfig,
                        const std::function<void(std::vector<StEntry>&)>& edit = {}) {
  const std::string good = ckpt_dir("hf-bad-" + name + "-model"), dir = ckpt_dir("hf-bad-" + name);
  test::spit(good + "/config.json", kLlamaConfig);
  const RunConfig cfg = load_run_config("", {"train.init_from=\"hf:" + good + "\"", "model.seq_len=16"});
  test::spit(dir + "/config.json", config);
  static std::vector<float> zeros(1 << 20, 0.f);
  std::vector<StEntry> entries;
  for (const HfTensorMap& m : hf_tensor_map(cfg.model))
    for (const HfPart& p : m.parts) {
      std::vector<int64_t> shape = m.shape;
      shape[0] = p.rows;
      entries.push_back({p.name, StDType::F32, shape, zeros.data()});
    }
  if (edit) edit(entries);
  write_safetensors(dir + "/model.safetensors", entries, {{"format", "pt"}});
  return dir;
}

std::string open_error(const std::string& dir) {
  try {
    const RunConfig cfg = load_run_config("", {"train.init_from=\"hf:" + dir + "\"", "model.seq_len=16"});
    HfCheckpoint::open(dir, cfg.model);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string config_with(const std::string& field) {
  std::string c = kLlamaConfig;
  return c.substr(0, c.rfind('}')) + ", " + field + "}";
}

TEST(HfImport, AGoodFolderLoadsAndTheModelIsTheCheckpoints) {
  const std::string dir = write_llama("good");
  EXPECT_EQ(open_error(dir), "");
  const RunConfig cfg = load_run_config("", {"train.init_from=\"hf:" + dir + "\""});
  EXPECT_TRUE(cfg.model.is_llama());
  EXPECT_EQ(cfg.model.kv_heads(), 2);
  EXPECT_EQ(cfg.model.ffn(), 96);
  EXPECT_EQ(cfg.model.seq_len, 64);  // the checkpoint's limit (at most 1024) unless set
  // A [model] field that disagrees with config.json is named.
  try {
    load_run_config("", {"train.init_from=\"hf:" + dir + "\"", "model.n_layer=3"});
    FAIL() << "a disagreeing model.n_layer was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_layer"), std::string::npos) << e.what();
  }
}

// Each rank reads the bytes of its own pieces only: a tp2 rank reads
// exactly its pieces' elements, under 60% of what one process reads (the
// block matrices and the vocabulary split, padded; norms whole on both).
TEST(HfImport, ARankReadsOnlyItsPieces) {
  const std::string dir = write_llama("bytes");
  const RunConfig cfg = load_run_config("", {"train.init_from=\"hf:" + dir + "\"", "model.seq_len=16"});
  const auto whole = HfCheckpoint::open(dir, cfg.model);
  const ParamLayout all = ParamLayout::for_model(cfg.model);
  std::vector<float> values(size_t(all.total));
  fill_from_checkpoint(*whole, all, values.data());
  const double whole_bytes = double(whole->bytes_read());
  EXPECT_GT(whole_bytes, 0.9 * double(whole->file_bytes()));
  const auto half = HfCheckpoint::open(dir, cfg.model);
  const ParamLayout rank0 = ParamLayout::for_model(cfg.model, ModelShard{0, 2});
  std::vector<float> part(size_t(rank0.total));
  fill_from_checkpoint(*half, rank0, part.data());
  // Exactly its pieces' elements (F32 here), no more.
  int64_t elements = 0;
  for (size_t i = 0; i < rank0.params.size(); i++)
    for (const TensorPiece& p : rank0.pieces(int(i))) elements += shape_numel(p.shape);
  EXPECT_EQ(half->bytes_read(), uint64_t(elements) * 4);
  EXPECT_LT(double(half->bytes_read()), 0.6 * whole_bytes);
}

TEST(HfImport, BadFoldersAreNamed) {
  struct Case {
    std::string name, dir, want;
  };
  std::vector<Case> cases = {
      {"architecture", write_llama("arch", R"({"architectures": ["BertModel"], "vocab_size": 300})"), "BertModel"},
      {"unknown field", write_llama("field", config_with(R"("sliding_window": 4096)")), "sliding_window"},
      {"rope scaling not built", write_llama("rope", [] {
         std::string c = kLlamaConfig;
         c.replace(c.find("\"rope_scaling\": null"), 20, R"("rope_scaling": {"rope_type": "yarn", "factor": 8.0})");
         return c;
       }()), "rope_scaling' has rope_type 'yarn'"},
      {"llama3 rope scaling incomplete", write_llama("rope3", [] {
         std::string c = kLlamaConfig;
         c.replace(c.find("\"rope_scaling\": null"), 20, R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})");
         return c;
       }()), "rope_scaling.low_freq_factor"},
      {"Qwen2 field on LLaMA", write_llama("qwen-field", config_with(R"("use_sliding_window": false)")),
       "use_sliding_window"},
      {"a sliding layer without the window (transformers 5.x's layer_types)", write_llama("layer-types", [] {
         std::string c = config_with(R"("layer_types": ["full_attention", "sliding_attention"])");
         c.replace(c.find("LlamaForCausalLM"), 16, "Qwen2ForCausalLM");
         return c;
       }()), "'layer_types' holds 'sliding_attention'"},
      {"pretraining_tp", write_llama("tp", [] {
         std::string c = kLlamaConfig;
         c.replace(c.find("\"pretraining_tp\": 1"), 18, "\"pretraining_tp\": 2");
         return c;
       }()), "pretraining_tp"},
      {"missing tensor", write_llama("missing", kLlamaConfig, [](std::vector<StEntry>& e) {
         e.erase(std::remove_if(e.begin(), e.end(), [](const StEntry& s) { return s.name == "model.layers.1.self_attn.k_proj.weight"; }), e.end());
       }), "model.layers.1.self_attn.k_proj.weight"},
      {"wrong shape", write_llama("shape", kLlamaConfig, [](std::vector<StEntry>& e) {
         for (StEntry& s : e)
           if (s.name == "model.norm.weight") s.shape = {63};
       }), "model.norm.weight"},
      {"I32 weight", write_llama("i32", kLlamaConfig, [](std::vector<StEntry>& e) {
         for (StEntry& s : e)
           if (s.name == "model.norm.weight") s.dtype = StDType::I32;
       }), "I32"},
  };
  for (const Case& c : cases) {
    const std::string e = open_error(c.dir);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.name << ": " << e;
  }
  // A truncated file, and an index naming a shard that does not hold the tensor.
  const std::string cut = write_llama("truncated");
  std::filesystem::resize_file(cut + "/model.safetensors", std::filesystem::file_size(cut + "/model.safetensors") / 2);
  EXPECT_NE(open_error(cut).find("model.safetensors"), std::string::npos) << open_error(cut);
  const std::string indexed = write_llama("index");
  std::filesystem::rename(indexed + "/model.safetensors", indexed + "/model-00001-of-00001.safetensors");
  test::spit(indexed + "/model.safetensors.index.json",
             R"({"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  EXPECT_NE(open_error(indexed).find("model-00002-of-00002.safetensors"), std::string::npos) << open_error(indexed);
  const std::string none = ckpt_dir("hf-bad-empty");
  test::spit(none + "/config.json", kLlamaConfig);
  EXPECT_NE(open_error(none).find("model.safetensors"), std::string::npos) << open_error(none);
}

}  // namespace
}  // namespace loom
