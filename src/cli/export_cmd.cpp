// `loom export`: a checkpoint of any layout -> Hugging Face files
// (GPT2LMHeadModel or LlamaForCausalLM, by the checkpoint's model family).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_model.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/peft_adapter.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "data/dataset_manifest.h"
#include "data/text_tokenizer.h"

namespace loom::cli {
namespace {

// bos/eos for config.json (see HfSpecialTokens): the tokenizer given, else
// the run's (the one <data.path>/dataset.toml names for data.format =
// "shards"): its BOS if it adds one (Llama 3's), else its end-of-text, as
// bos; its end-of-text as eos. None for byte-level data, or (with a warning)
// when the run's tokenizer is not where its config says.
HfSpecialTokens tokens_of(const TextTokenizer& t) {
  return {t.bos_id() >= 0 ? t.bos_id() : t.eos_id(), t.eos_id()};
}

// The tokenizer given, else the run's; null for byte-level data or (with a
// warning) when the run's tokenizer is not where its config says.
std::unique_ptr<TextTokenizer> run_tokenizer(const Checkpoint& ckpt, const std::string& tokenizer) {
  if (!tokenizer.empty()) return load_tokenizer(resolve_path(tokenizer));
  const RunData data = run_data(ckpt.manifest(), "checkpoint '" + ckpt.dir() + "'");
  if (data.format != "shards") return nullptr;
  std::string path = resolve_path(data.path) + "/tokenizer.model";
  if (std::filesystem::exists(resolve_path(data.path) + "/dataset.toml"))
    path = resolve_path(data.path) + "/" + read_dataset_manifest(resolve_path(data.path)).tokenizer;
  if (std::filesystem::exists(path)) return load_tokenizer(path);
  std::fprintf(stderr,
               "export: warning: the run's tokenizer '%s' is not there; bos_token_id and eos_token_id are left null "
               "(--tokenizer PATH names it)\n",
               path.c_str());
  return nullptr;
}

}  // namespace

int cmd_export(const Args& args) {
  std::string checkpoint, out, format = "hf", dtype_name = "f32", tokenizer, base;
  bool merge = false, drop_router_bias = false;
  for (size_t i = 0; i < args.size(); i++) {
    std::string a = args[i], inline_value;
    bool has_inline = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos)
      inline_value = a.substr(eq + 1), a = a.substr(0, eq), has_inline = true;
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      LOOM_USER_CHECK(i + 1 < args.size(), "export: %s needs a value", a.c_str());
      return args[++i];
    };
    if (a == "--checkpoint") checkpoint = value();
    else if (a == "--out") out = value();
    else if (a == "--format") format = value();
    else if (a == "--dtype") dtype_name = value();
    else if (a == "--tokenizer") tokenizer = value();
    else if (a == "--base") base = value();
    else if (a == "--merge") merge = true;
    else if (a == "--drop-router-bias") drop_router_bias = true;
    else throw UserError(strprintf("export: unknown option '%s' (try loom export --help)", a.c_str()));
  }
  LOOM_USER_CHECK(!checkpoint.empty(), "export: --checkpoint DIR is required");
  LOOM_USER_CHECK(!out.empty(), "export: --out DIR is required");
  LOOM_USER_CHECK(format == "hf" || format == "peft", "export: unknown --format '%s' (hf, peft)", format.c_str());
  LOOM_USER_CHECK(!merge || format == "hf", "export: --merge is for --format hf (the adapters folded into the base)");
  HfExportOptions opt;
  if (dtype_name == "f32" || dtype_name == "fp32") opt.dtype = StDType::F32;
  else if (dtype_name == "bf16") opt.dtype = StDType::BF16;
  else if (dtype_name == "f16" || dtype_name == "fp16") opt.dtype = StDType::F16;
  else throw UserError(strprintf("export: unknown --dtype '%s' (f32, bf16, f16)", dtype_name.c_str()));

  opt.merge_lora = merge, opt.base_dir = base, opt.drop_router_bias = drop_router_bias;

  ResumeChoice chosen = resolve_resume(checkpoint, "");  // verifies every file's sha256
  Checkpoint ckpt = Checkpoint::open(chosen.dir);
  if (format == "peft") {
    const CheckpointModel model(ckpt, base);
    const std::string& source = model.base_source();
    const std::string base_name = source.rfind("hf:", 0) == 0 ? source.substr(3) : "";
    const PeftExportResult r = export_peft(model, model.config(), base_name, out, opt.dtype);
    std::printf("export: %s (step %lld) -> %s (%d tensors: LoRA rank %d on %s, %.2f MB) and %s; base %s\n",
                ckpt.dir().c_str(), (long long)ckpt.manifest().step, r.weights_path.c_str(), r.tensors,
                model.config().lora.rank, nlohmann::json(model.config().lora.targets).dump().c_str(),
                double(r.bytes) / 1e6, r.config_path.c_str(), source.c_str());
    return 0;
  }
  const std::unique_ptr<TextTokenizer> tok = run_tokenizer(ckpt, tokenizer);
  if (tok) opt.tokens = tokens_of(*tok);
  HfExportResult r = export_hf(ckpt, out, opt);
  std::printf("export: %s (step %lld) -> %s (%d tensors, %.1f MB) and %s\n", ckpt.dir().c_str(),
              (long long)ckpt.manifest().step, r.weights_path.c_str(), r.tensors, double(r.bytes) / 1e6,
              r.config_path.c_str());
  // A Hugging Face tokenizer (its files include tokenizer_config.json) goes
  // beside the model as it came, so transformers loads the folder as is.
  if (tok) {
    const auto files = tok->files();
    const bool hf = std::any_of(files.begin(), files.end(), [](const auto& f) { return f.first == "tokenizer_config.json"; });
    if (hf) {
      for (const auto& [name, bytes] : files) write_file_atomically(out + "/" + name, bytes);
      std::printf("export: the tokenizer's files (%s) copied beside it\n", tok->kind().c_str());
    }
  }
  return 0;
}

}  // namespace loom::cli
