#include "model/moe/router_state.h"

#include <algorithm>
#include <array>

#include "core/check.h"

namespace loom::moe {

RouterState::RouterState(const ModelConfig& cfg, int first_layer, int end_layer, int slots)
    : mode_(cfg.moe_balance), rate_(cfg.moe_bias_rate), E_(cfg.n_experts) {
  for (int l = first_layer; l < end_layer; l++)
    if (cfg.moe_block(l)) layers_.push_back(l);
  bias_.assign(layers_.size() * size_t(E_), 0.f);
  counts_.assign(layers_.size() * size_t(E_), 0);
  if (mode_ == MoeBalance::switch_) forward_counts_.assign(size_t(slots) * layers_.size() * size_t(E_), 0);
}

void RouterState::set_forward_counts(int slot, int layer, const int32_t* rows) {
  const int i = index(layer);
  if (i < 0 || forward_counts_.empty()) return;
  std::copy(rows, rows + E_, forward_counts_.begin() + (int64_t(slot) * int64_t(layers_.size()) + i) * E_);
}

void RouterState::slot_counts(int slot, float* sum) const {
  std::fill(sum, sum + E_, 0.f);
  if (forward_counts_.empty()) return;
  const int32_t* c = forward_counts_.data() + size_t(slot) * layers_.size() * size_t(E_);
  for (size_t i = 0; i < layers_.size(); i++)
    for (int e = 0; e < E_; e++) sum[e] += float(c[i * size_t(E_) + size_t(e)]);
}

int RouterState::index(int layer) const {
  auto it = std::lower_bound(layers_.begin(), layers_.end(), layer);
  return it != layers_.end() && *it == layer ? int(it - layers_.begin()) : -1;
}

const float* RouterState::bias(int layer) const {
  const int i = index(layer);
  return mode_ == MoeBalance::aux_free && i >= 0 ? bias_.data() + size_t(i) * E_ : nullptr;
}

float* RouterState::bias_values(int layer) {
  const int i = index(layer);
  return i >= 0 ? bias_.data() + size_t(i) * E_ : nullptr;
}

std::string RouterState::bias_name(int layer) {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.gate.e_score_correction_bias";
}

void RouterState::load_biases(const GlobalTensors& tensors) {
  for (size_t i = 0; i < layers_.size(); i++) {
    float* b = bias_.data() + i * size_t(E_);
    const std::string name = bias_name(layers_[i]);
    if (!tensors.has(name)) {
      std::fill(b, b + E_, 0.f);
      continue;
    }
    const std::vector<float> v = tensors.read_global(name);
    LOOM_USER_CHECK(v.size() == size_t(E_), "%s holds %zu values; model.n_experts = %d", name.c_str(), v.size(), E_);
    std::copy(v.begin(), v.end(), b);
  }
}

void RouterState::begin_step() {
  exchange_s_ = hidden_s_ = 0, rows_received_ = 0;
  std::fill(counts_.begin(), counts_.end(), 0);
  z_sum_ = balance_sum_ = 0;
}

void RouterState::add_counts(int layer, const int32_t* rows) {
  const int i = index(layer);
  if (i < 0) return;
  for (int e = 0; e < E_; e++) counts_[size_t(i) * E_ + e] += rows[e];
}

void RouterState::update_bias(const std::vector<int>& model_layers, const int64_t* counts) {
  if (mode_ != MoeBalance::aux_free || rate_ == 0) return;
  std::array<float, 256> step;  // model.n_experts <= 256
  for (size_t i = 0; i < layers_.size(); i++) {
    const auto at = std::lower_bound(model_layers.begin(), model_layers.end(), layers_[i]);
    if (at == model_layers.end() || *at != layers_[i]) continue;
    const int64_t* c = counts + (at - model_layers.begin()) * E_;
    int64_t total = 0;
    for (int e = 0; e < E_; e++) total += c[e];
    if (total == 0) continue;
    // sign(mean - c_e) in integers (mean = total / E): exact on every rank.
    double mean_step = 0;
    for (int e = 0; e < E_; e++) {
      const int64_t d = total - int64_t(E_) * c[e];
      step[size_t(e)] = d > 0 ? float(rate_) : d < 0 ? -float(rate_) : 0.f;
      mean_step += step[size_t(e)];
    }
    mean_step /= E_;
    float* b = bias_.data() + i * size_t(E_);
    for (int e = 0; e < E_; e++) b[e] += step[size_t(e)] - float(mean_step);
  }
}

}  // namespace loom::moe
