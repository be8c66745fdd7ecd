#include "checkpoint/hf_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/model_fields.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/dtype.h"

namespace loom {
namespace {

struct HfTensor {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<uint16_t> narrow;  // the values in BF16/F16 when asked
};

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

}  // namespace

std::string parameter_key(const Checkpoint& ckpt, const std::string& name) {
  const ShardedTensors& t = ckpt.tensors();
  if (t.has(name)) return name;
  if (t.has("master." + name)) return "master." + name;
  throw UserError(strprintf("checkpoint '%s' has no parameter '%s'", ckpt.dir().c_str(), name.c_str()));
}

std::vector<float> read_parameter(const Checkpoint& ckpt, const std::string& name) {
  return ckpt.tensors().read_global(parameter_key(ckpt, name));
}

HfExportResult export_hf_gpt2(const Checkpoint& ckpt, const std::string& out_dir, StDType dtype) {
  LOOM_USER_CHECK(dtype != StDType::I32, "export: weights cannot be I32");
  const ModelConfig cfg = model_config_from_fields(ckpt.manifest().model, ckpt.manifest().model_real, ckpt.dir() + "/manifest.json");
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len;

  std::vector<HfTensor> out;
  // loom name, its expected shape, HF name, transpose ([out,in] -> [in,out])?
  auto add = [&](const std::string& loom_name, std::vector<int64_t> shape, const std::string& hf_name, bool transpose) {
    const ShardedTensors& t = ckpt.tensors();
    const std::string stored = parameter_key(ckpt, loom_name);
    LOOM_USER_CHECK(t.global_shape(stored) == shape, "checkpoint '%s': parameter '%s' does not have the shape its model needs",
                    ckpt.dir().c_str(), stored.c_str());
    HfTensor h{hf_name, shape, t.read_global(stored), {}};
    if (transpose) {
      h.values = transposed(h.values, shape[0], shape[1]);
      std::swap(h.shape[0], h.shape[1]);
    }
    out.push_back(std::move(h));
  };
  add("wte.weight", {V, C}, "transformer.wte.weight", false);
  add("wpe.weight", {T, C}, "transformer.wpe.weight", false);
  for (int l = 0; l < cfg.n_layer; l++) {
    const std::string p = "h." + std::to_string(l) + ".", hf = "transformer." + p;
    add(p + "ln_1.weight", {C}, hf + "ln_1.weight", false);
    add(p + "ln_1.bias", {C}, hf + "ln_1.bias", false);
    add(p + "attn.c_attn.weight", {3 * C, C}, hf + "attn.c_attn.weight", true);
    add(p + "attn.c_attn.bias", {3 * C}, hf + "attn.c_attn.bias", false);
    add(p + "attn.c_proj.weight", {C, C}, hf + "attn.c_proj.weight", true);
    add(p + "attn.c_proj.bias", {C}, hf + "attn.c_proj.bias", false);
    add(p + "ln_2.weight", {C}, hf + "ln_2.weight", false);
    add(p + "ln_2.bias", {C}, hf + "ln_2.bias", false);
    add(p + "mlp.c_fc.weight", {4 * C, C}, hf + "mlp.c_fc.weight", true);
    add(p + "mlp.c_fc.bias", {4 * C}, hf + "mlp.c_fc.bias", false);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, hf + "mlp.c_proj.weight", true);
    add(p + "mlp.c_proj.bias", {C}, hf + "mlp.c_proj.bias", false);
  }
  add("ln_f.weight", {C}, "transformer.ln_f.weight", false);
  add("ln_f.bias", {C}, "transformer.ln_f.bias", false);

  std::vector<StEntry> entries;
  for (HfTensor& h : out) {
    StEntry e{h.hf_name, dtype, h.shape, h.values.data()};
    if (dtype != StDType::F32) {
      h.narrow.resize(h.values.size());
      if (dtype == StDType::BF16) convert_f32_to_bf16(reinterpret_cast<bf16*>(h.narrow.data()), h.values.data(), h.values.size());
      else convert_f32_to_f16(reinterpret_cast<f16*>(h.narrow.data()), h.values.data(), h.values.size());
      e.data = h.narrow.data();
    }
    entries.push_back(e);
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  LOOM_USER_CHECK(!ec, "export: cannot create '%s': %s", out_dir.c_str(), ec.message().c_str());
  HfExportResult r;
  r.weights_path = out_dir + "/model.safetensors";
  r.config_path = out_dir + "/config.json";
  // transformers refuses safetensors files whose metadata lacks format "pt".
  WrittenFile w = write_safetensors(r.weights_path, entries, {{"format", "pt"}});
  r.tensors = int(entries.size());
  r.bytes = w.bytes;

  nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", V},
      {"n_positions", T},
      {"n_ctx", T},
      {"n_embd", C},
      {"n_layer", cfg.n_layer},
      {"n_head", cfg.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"torch_dtype", dtype == StDType::F32 ? "float32" : dtype == StDType::BF16 ? "bfloat16" : "float16"},
      {"loom_checkpoint_step", ckpt.manifest().step},
  };
  write_file_atomically(r.config_path, config.dump(2) + "\n");
  return r;
}

}  // namespace loom
