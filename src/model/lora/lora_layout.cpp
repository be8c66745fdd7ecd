#include "model/lora/lora_layout.h"

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

}  // namespace loom::lora
