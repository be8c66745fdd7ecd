// GPT-2 forward and backward on one process, written out by hand (no autograd).
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

namespace loom {

class GPT {
 public:
  // B, T: the largest batch and sequence length forward() will be given.
  // grad_buffer: where gradients live (at least layout().total floats, zeroed),
  // e.g. a data-parallel gradient buffer; nullptr: the model allocates its own.
  // param_floats: the parameter buffer's size when more than the layout's
  // (ZeRO pads the buffers so that every rank's shard is the same size).
  GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer = nullptr, int64_t param_floats = 0);

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }

  // Fills every parameter from the counter-based RNG (GPT-2 initialization).
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
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale = 1.f);
  void zero_grads();

  // Called during backward with a parameter's index as soon as its gradient
  // is final (nothing later in this backward writes it), in the order of the
  // layout; every parameter once per backward. Data parallelism starts a
  // bucket's reduction from it. An empty function: no calls.
  void set_grad_ready_hook(std::function<void(int param_index)> hook) { grad_ready_ = std::move(hook); }

  const float* logits() const { return logits_; }  // [B,T,V] after forward()
  size_t activation_bytes() const { return acts_.size(); }

 private:
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
  };
  void run_forward(const int32_t* tokens, int B, int T);
  void run_backward(const int32_t* tokens, int B, int T);
  void grad_ready(int i) const {
    if (grad_ready_) grad_ready_(i);
  }

  GPTConfig cfg_;
  ParamLayout layout_;
  int maxB_, maxT_;
  Arena params_, grads_, acts_;
  float* grads_ptr_ = nullptr;  // grads_ or the buffer given to the constructor
  std::function<void(int)> grad_ready_;
  cpu::MatmulEngine matmul_;

  float* encoded_;  // [B,T,C] input of layer 0
  std::vector<LayerActs> layers_;
  float *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_;
  // Backward work space, reused by every layer.
  float *dres_, *dbuf_c_, *dbuf_3c_, *dbuf_4c_, *datt_;
};

}  // namespace loom
