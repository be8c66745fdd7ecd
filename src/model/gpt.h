// GPT-2 forward and backward, written out by hand (no autograd), on one rank's
// shard of the model (ModelShard): all of it on one process, or its
// tensor-parallel slices (Megatron-LM: column/row-parallel linears, heads
// split, vocabulary-parallel embedding and loss, optional sequence
// parallelism; the layers in parallel/tp/).
//
// Parameters and gradients each live in one allocation (ParamLayout gives the
// offsets); activations for a (batch, seq_len) are planned and allocated once
// in the constructor, so a training step allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "parallel/tp/tensor_parallel.h"
#include "parallel/tp/vocab_parallel.h"

namespace loom {

class GPT {
 public:
  // B, T: the largest batch and sequence length forward() will be given.
  // grad_buffer: where gradients live (at least layout().total floats, zeroed),
  // e.g. a data-parallel gradient buffer; nullptr: the model allocates its own.
  // param_floats: the parameter buffer's size when more than the layout's
  // (ZeRO pads the buffers so that every rank's shard is the same size).
  GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer = nullptr, int64_t param_floats = 0);
  // A tensor-parallel shard: tp is this rank's group (shard.tp_rank/tp_size
  // must match it).
  GPT(const GPTConfig& cfg, const ModelShard& shard, const TensorParallel& tp, int B, int T,
      float* grad_buffer = nullptr, int64_t param_floats = 0);

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }

  // Fills every parameter from the counter-based RNG (GPT-2 initialization);
  // each rank fills its slices of the global tensors, so any layout starts
  // from the same weights.
  void init_parameters(uint64_t seed);

  float* params() { return params_.at<float>(0); }
  float* grads() { return grads_ptr_; }
  int64_t params_size() const { return layout_.total; }
  float* param(int i) { return params() + layout_.params[i].offset; }
  float* grad(int i) { return grads() + layout_.params[i].offset; }

  // Mean cross-entropy of the next-token targets; keeps the logits
  // (logits() afterwards). tokens, targets: [B,T]; a target < 0 is ignored.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // forward + backward; gradients are *added* to grads() (call zero_grads()
  // first unless accumulating). loss_scale multiplies the gradient of the
  // mean loss (1/accumulation steps, or a loss-scaler's factor).
  // With sequence parallelism the gradients of the norms and the position
  // table are this rank's partial sums (sequence_partial_grads()); the
  // caller sums them over the tp group once per step.
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale = 1.f);
  void zero_grads();

  // Called during backward with a parameter's index as soon as its gradient
  // is final (nothing later in this backward writes it), in the order of the
  // layout; every parameter once per backward. Data parallelism starts a
  // bucket's reduction from it. An empty function: no calls.
  void set_grad_ready_hook(std::function<void(int param_index)> hook) { grad_ready_ = std::move(hook); }

  // Parameters whose gradients are partial sums over the tp ranks (sequence
  // parallelism: each rank sees only its rows); empty otherwise.
  std::vector<int> sequence_partial_grads() const;

  // [B,T,vocab_slice().rows] after forward(): this rank's vocabulary columns.
  const float* logits() const { return logits_; }
  const tp::VocabSlice& vocab_slice() const { return vocab_; }
  size_t activation_bytes() const { return acts_.size(); }
  // Seconds this rank spent waiting on tensor-parallel communication so far.
  double tp_comm_seconds() const { return tp_.exposed_seconds(); }

 private:
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
  };
  void plan_activations(int B, int T);
  void run_forward(const int32_t* tokens, int B, int T);
  void run_backward(const int32_t* tokens, int B, int T);
  void grad_ready(int i) const {
    if (grad_ready_) grad_ready_(i);
  }

  GPTConfig cfg_;
  ParamLayout layout_;
  TensorParallel tp_;
  tp::VocabSlice vocab_;
  int maxB_, maxT_;
  Arena params_, grads_, acts_;
  float* grads_ptr_ = nullptr;  // grads_ or the buffer given to the constructor
  std::function<void(int)> grad_ready_;
  cpu::MatmulEngine matmul_;

  // Rows outside the tensor-parallel regions are this rank's share of the
  // B x T tokens with sequence parallelism ("local"), all of them otherwise.
  float* encoded_;  // [local, C] input of layer 0
  std::vector<LayerActs> layers_;
  float *lnf_, *lnf_mean_, *lnf_rstd_, *lnf_full_, *logits_, *losses_, *xent_scratch_;
  // Sequence parallelism only: [B*T, C] for gathered activations and for
  // partial sums / gathered gradients.
  float *gathered_ = nullptr, *grad_work_ = nullptr;
  // Backward work space, reused by every layer.
  float *dres_, *dbuf_c_, *datty_, *dbuf_3c_, *dbuf_4c_, *datt_;
};

}  // namespace loom
