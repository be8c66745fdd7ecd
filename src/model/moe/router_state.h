// A stage module's mixture-of-experts layers between steps: the
// auxiliary-loss-free balancing's selection bias (one [E] per layer) and
// what a step learns about the routing (rows per expert, the router losses'
// sums) for the train loop to combine over ranks (train/replica.cpp).
//
// The bias moves once per step from the whole global batch's integer
// counts, so every layout moves it the same way (torchtitan's rule on
// DeepSeek-V3's: each expert's bias steps by `rate` towards the mean load,
// sign(mean - count_e), then the steps are centred). Counts are taken in
// the backward pass, once per micro-batch whatever recomputation repeats
// of the forward; an evaluation's forward counts nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/global_tensors.h"
#include "model/config.h"

namespace loom::moe {

class RouterState {
 public:
  // The MoE layers among [first_layer, end_layer); slots: micro-batches in flight.
  RouterState(const ModelConfig& cfg, int first_layer, int end_layer, int slots = 1);

  const std::vector<int>& layers() const { return layers_; }  // global indices, ascending
  int experts() const { return E_; }
  // aux_free: layer's selection bias [E] (all zeros until the first update);
  // nullptr for other modes or a layer not held here.
  const float* bias(int layer) const;
  float* bias_values(int layer);  // the same, writable (checkpoint loading)
  // The checkpoint tensor holding a layer's bias (DeepSeek-V3's name for it).
  static std::string bias_name(int layer);

  // Each held layer's bias from a checkpoint's tensors (one written before
  // balancing existed, or a Hugging Face model, has none: zeros).
  void load_biases(const GlobalTensors& tensors);

  // --- One step. ---
  void begin_step();
  // The router losses' weight per unit of loss: the loss scale over the
  // global batch's tokens (every token is routed, counted target or not).
  void set_loss_weight(float w) { loss_weight_ = w; }
  float loss_weight() const { return loss_weight_; }
  // switch: a layer's rows per expert in the micro-batch of `slot` (set by
  // its forward, again by a recomputation: the same values), and their sum
  // over every MoE layer of the model (all on this stage) for its backward.
  void set_forward_counts(int slot, int layer, const int32_t* rows);
  void slot_counts(int slot, float* sum) const;
  // A micro-batch's rows per expert (int32 [E]) at a layer.
  void add_counts(int layer, const int32_t* rows);
  // The router losses' unweighted sums: z: sum over tokens of logsumexp^2;
  // sequence: sum over sequences of tokens x sum_e f_e P_e (cp: this rank's part).
  void add_z(double v) { z_sum_ += v; }
  void add_balance(double v) { balance_sum_ += v; }
  // Expert parallelism: seconds spent waiting on the token all-to-alls (the
  // exposed part), the part of their flight that ran beside other work
  // (hidden), and the rows this rank's experts received.
  void add_exchange(double exposed, double hidden, int64_t rows) {
    exchange_s_ += exposed, hidden_s_ += hidden, rows_received_ += rows;
  }
  double exchange_seconds() const { return exchange_s_; }
  double hidden_seconds() const { return hidden_s_; }
  int64_t rows_received() const { return rows_received_; }
  // The step's rows per expert, [layers().size(), E].
  const std::vector<int64_t>& step_counts() const { return counts_; }
  double z_sum() const { return z_sum_; }
  double balance_sum() const { return balance_sum_; }
  // aux_free: moves the biases from the global batch's counts (the same on
  // every rank): counts [model_layers.size(), E] for the model's MoE layers
  // model_layers (ascending; those held here among them).
  void update_bias(const std::vector<int>& model_layers, const int64_t* counts);

 private:
  int index(int layer) const;  // into layers_, -1 if not held

  MoeBalance mode_;
  double rate_;
  int E_;
  std::vector<int> layers_;
  std::vector<float> bias_;      // [layers, E]
  std::vector<int64_t> counts_;  // [layers, E]
  std::vector<int32_t> forward_counts_;  // switch: [slots, layers, E]
  double z_sum_ = 0, balance_sum_ = 0, exchange_s_ = 0, hidden_s_ = 0;
  int64_t rows_received_ = 0;
  float loss_weight_ = 0;
};

}  // namespace loom::moe
