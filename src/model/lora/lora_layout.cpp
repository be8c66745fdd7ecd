#include "model/lora/lora_layout.h"

#include <algorithm>
#include <cmath>

namespace loom::lora {
namespace {

// A's initial values: PEFT draws kaiming_uniform(a = sqrt 5), i.e.
// uniform(+-1/sqrt(in)); loom's counter-based normal with the same
// variance, 1 / (3 in). B starts at zero, so the adapted model starts as
// the base.
float a_std(int64_t in) { return float(1.0 / std::sqrt(3.0 * double(in))); }

void mark(ParamLayout& lay, int i, const LoraConfig& lora, bool tp_partial) {
  ParamSpec& p = lay.params[size_t(i)];
  p.tp_partial = tp_partial;
  p.init_salt = lora.seed * 0x9E3779B97F4A7C15ull;
}

}  // namespace

Adapter add_column(ParamLayout& lay, const LoraConfig& lora, const std::string& module, const std::string& hf_module,
                   int64_t in, int64_t out, std::vector<int64_t> blocks) {
  if (!lora.enabled() || !lora.targets_module(hf_module)) return {};
  const int64_t r = lora.rank;
  Adapter ad;
  ad.b = lay.add(module + ".lora_B.weight", {out, r}, Init::Zeros, 0, TensorSplit{0, std::move(blocks)});
  ad.a = lay.add(module + ".lora_A.weight", {r, in}, Init::Normal, a_std(in), TensorSplit{});
  mark(lay, ad.b, lora, false), mark(lay, ad.a, lora, true);
  return ad;
}

Adapter add_row(ParamLayout& lay, const LoraConfig& lora, const std::string& module, const std::string& hf_module,
                int64_t in, int64_t out) {
  if (!lora.enabled() || !lora.targets_module(hf_module)) return {};
  const int64_t r = lora.rank;
  Adapter ad;
  ad.b = lay.add(module + ".lora_B.weight", {out, r}, Init::Zeros, 0, TensorSplit{});
  ad.a = lay.add(module + ".lora_A.weight", {r, in}, Init::Normal, a_std(in), TensorSplit{1, {}});
  mark(lay, ad.b, lora, true), mark(lay, ad.a, lora, false);
  return ad;
}

std::vector<AdapterSite> adapter_sites(const ModelConfig& cfg) {
  std::vector<AdapterSite> out;
  if (!cfg.lora.enabled()) return out;
  const ParamLayout lay = ParamLayout::for_model(cfg);
  const int64_t q = int64_t(cfg.n_head) * cfg.head_dim(), kv = int64_t(cfg.kv_heads()) * cfg.head_dim(),
                F = cfg.ffn();
  const std::string suffix = ".lora_B.weight";
  for (const ParamSpec& p : lay.params) {
    if (!p.name.ends_with(suffix)) continue;
    AdapterSite s;
    s.module = p.name.substr(0, p.name.size() - suffix.size());
    s.hf_module = cfg.is_llama() ? s.module : "transformer." + s.module;
    s.a = s.module + ".lora_A.weight", s.b = p.name;
    s.rows = p.shape[0], s.in = lay.find(s.a)->shape[1];
    s.base = s.module + ".weight";
    // LLaMA's per-projection adapters on its fused products.
    const std::string dir = s.module.substr(0, s.module.rfind('.') + 1), proj = s.module.substr(dir.size());
    if (proj == "q_proj" || proj == "k_proj" || proj == "v_proj") {
      s.base = dir + "qkv_proj.weight";
      s.row0 = proj == "q_proj" ? 0 : proj == "k_proj" ? q : q + kv;
    } else if (proj == "gate_proj" || proj == "up_proj") {
      s.base = dir + "gate_up_proj.weight";
      s.row0 = proj == "gate_proj" ? 0 : F;
    }
    out.push_back(std::move(s));
  }
  // The layout lists the last layer first.
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace loom::lora
