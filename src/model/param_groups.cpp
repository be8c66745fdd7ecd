#include "model/param_groups.h"

#include <fnmatch.h>

#include "core/check.h"

namespace loom {

bool tensor_name_matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace {

bool frozen_by(const std::vector<std::string>& freeze, const std::string& name) {
  for (const std::string& p : freeze)
    if (tensor_name_matches(p, name)) return true;
  return false;
}

// Frozen by train.freeze's patterns or, with LoRA, as part of the base.
bool frozen_in_run(const LoraConfig& lora, const std::vector<std::string>& freeze, const std::string& name) {
  if (frozen_by(freeze, name)) return true;
  if (!lora.enabled() || is_lora_tensor(name)) return false;
  return !(lora.train_biases && name.ends_with(".bias"));
}

int64_t global_numel(const ParamSpec& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

}  // namespace

bool is_expert_tensor(const std::string& name) { return name.find(".block_sparse_moe.experts.") != std::string::npos; }

std::vector<ParamGroupSpec> param_groups(const ModelConfig& model, const std::vector<std::string>& freeze, int ep) {
  // With LoRA the base is frozen: every tensor but the adapters (and, with
  // lora.bias = "all", the biases).
  const LoraConfig lora = model.lora;
  auto frozen = [freeze, lora](const std::string& name) { return frozen_in_run(lora, freeze, name); };
  // Expert parallelism: the experts' tensors differ between an ep group's
  // ranks, so they are groups of their own over the expert-data group.
  auto dense = [ep](const std::string& name) { return ep == 1 || !is_expert_tensor(name); };
  std::vector<ParamGroupSpec> groups;
  groups.push_back({"trained", false, GroupKind::data,
                    [frozen, dense](const std::string& name) { return dense(name) && !frozen(name); }});
  const bool any_frozen = !freeze.empty() || lora.enabled();
  if (any_frozen)
    groups.push_back({"frozen", true, GroupKind::data,
                      [frozen, dense](const std::string& name) { return dense(name) && frozen(name); },
                      lora.enabled()});
  if (ep > 1) {
    groups.push_back({"experts", false, GroupKind::expert_data,
                      [frozen](const std::string& name) { return is_expert_tensor(name) && !frozen(name); }});
    if (any_frozen)
      groups.push_back({"frozen experts", true, GroupKind::expert_data,
                        [frozen](const std::string& name) { return is_expert_tensor(name) && frozen(name); },
                        lora.enabled()});
  }
  // Only the groups some tensor of the whole model falls in.
  const ParamLayout whole = ParamLayout::for_model(model);
  std::vector<bool> used(groups.size(), false);
  for (int g : group_of_tensors(groups, whole)) used[size_t(g)] = true;
  std::vector<ParamGroupSpec> kept;
  for (size_t g = 0; g < groups.size(); g++)
    if (used[g]) kept.push_back(std::move(groups[g]));
  return kept;
}

std::vector<int> group_of_tensors(const std::vector<ParamGroupSpec>& groups, const ParamLayout& layout) {
  std::vector<int> of;
  for (const ParamSpec& p : layout.params) {
    int found = -1;
    for (size_t g = 0; g < groups.size(); g++) {
      if (!groups[g].holds(p.name)) continue;
      LOOM_CHECK(found < 0, "tensor %s is in two parameter groups, '%s' and '%s'", p.name.c_str(),
                 groups[size_t(found)].name.c_str(), groups[g].name.c_str());
      found = int(g);
    }
    LOOM_CHECK(found >= 0, "tensor %s is in no parameter group", p.name.c_str());
    of.push_back(found);
  }
  return of;
}

std::string freeze_problem(const ModelConfig& model, const std::vector<std::string>& freeze) {
  const ParamLayout whole = ParamLayout::for_model(model);
  for (const std::string& pattern : freeze) {
    if (pattern.empty()) return "an empty pattern";
    bool any = false;
    for (const ParamSpec& p : whole.params) any = any || tensor_name_matches(pattern, p.name);
    if (!any)
      return "pattern \"" + pattern + "\" matches no tensor of the model (global tensor names, e.g. \"" +
             whole.params.back().name + "\" or \"" + whole.params[whole.params.size() / 2].name + "\")";
  }
  const FrozenShare share = frozen_share(model, freeze);
  if (share.tensors == int(whole.params.size())) return "it freezes every tensor: nothing would be trained";
  return "";
}

FrozenShare frozen_share(const ModelConfig& model, const std::vector<std::string>& freeze) {
  FrozenShare s;
  for (const ParamSpec& p : ParamLayout::for_model(model).params) {
    s.total += global_numel(p);
    if (frozen_in_run(model.lora, freeze, p.name)) s.frozen += global_numel(p), s.tensors++;
  }
  return s;
}

}  // namespace loom
