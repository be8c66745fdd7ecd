// A LoRA adapter's two tensors in a family's layout, split over the
// tensor-parallel ranks as the product they adapt:
//   column-parallel product (each rank some output features): B [out, r]
//     split by rows as the product's weight is, A [r, in] whole;
//   row-parallel product (each rank some input features): A split by
//     columns, B whole.
// The whole factor's gradient is a partial sum on each tp rank (the split
// factor's features are only this rank's): ParamSpec::tp_partial.
// Names: the module's loom name + ".lora_A.weight" / ".lora_B.weight".
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"

namespace loom::lora {

// Indices of an adapter's factors in the layout (-1: the layer has none).
struct Adapter {
  int a = -1, b = -1;
  bool on() const { return a >= 0; }
};

// Adds the adapter of `module` (a loom name such as "h.3.attn.c_attn";
// `hf_module`, its HF module path, is what lora.targets match) when it is a
// target; the product is [out, in], `blocks` its rows' tp blocks (empty:
// one). Returns {-1, -1} otherwise.
Adapter add_column(ParamLayout& lay, const LoraConfig& lora, const std::string& module,
                   const std::string& hf_module, int64_t in, int64_t out, std::vector<int64_t> blocks = {});
Adapter add_row(ParamLayout& lay, const LoraConfig& lora, const std::string& module, const std::string& hf_module,
                int64_t in, int64_t out);

// Where an adapter of a model sits: its module's loom name ("h.3.attn.c_attn")
// and HF path ("transformer.h.3.attn.c_attn": PEFT's keys and
// target_modules), its factors, and the rows [row0, row0 + rows) of the
// base tensor its product B A adds to (a block of a fused q/k/v or gate/up).
struct AdapterSite {
  std::string module, hf_module, a, b, base;
  int64_t row0 = 0, rows = 0, in = 0;
};
// Every adapter of `cfg` (none without LoRA), in layer order.
std::vector<AdapterSite> adapter_sites(const ModelConfig& cfg);

}  // namespace loom::lora
