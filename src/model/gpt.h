// GPT-2 forward and backward, written out by hand (no autograd), on one rank's
// shard of the model (ModelShard): all of it on one process, its
// tensor-parallel slices (Megatron-LM: column/row-parallel linears, heads
// split, vocabulary-parallel embedding and loss, optional sequence
// parallelism; the layers in parallel/tp/), and/or one pipeline chunk (a
// range of blocks, with the embedding on the first and ln_f + the tied head
// on the last).
//
// Parameters and gradients each live in one allocation (ParamLayout gives the
// offsets); activations are planned and allocated once in the constructor,
// in `slots` sets (a pipeline stage holds several micro-batches in flight),
// so a training step allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "kernels/cpu/matmul_lowp.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "parallel/tp/tensor_parallel.h"
#include "parallel/tp/vocab_parallel.h"
#include "precision/policy.h"

namespace loom {

// Where a model's buffers come from; nullptr: the model allocates its own.
struct GPTBuffers {
  float* params = nullptr;  // at least layout().total floats
  float* grads = nullptr;   // at least layout().total floats, zeroed (e.g. a data-parallel gradient buffer)
  int64_t param_floats = 0;  // own parameter buffer's size when more than the layout's (ZeRO padding)
  int slots = 1;             // activation sets (micro-batches in flight)
  // bf16 / fp16: matrix products read a 16-bit copy of the weights and the
  // activations kept for backward are 16-bit (docs/precision.md lists which).
  ComputePrecision compute = ComputePrecision::fp32;
  // bf16 / fp16: where the 16-bit weights live (layout().total elements);
  // nullptr: the model allocates them.
  void* weights16 = nullptr;
};

class GPT {
 public:
  // B, T: the largest batch and sequence length a forward will be given.
  GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer = nullptr, int64_t param_floats = 0);
  // A shard: tp is this rank's tensor-parallel group (shard.tp_rank/tp_size
  // must match it).
  GPT(const GPTConfig& cfg, const ModelShard& shard, const TensorParallel& tp, int B, int T,
      const GPTBuffers& buffers = {});

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }

  // Fills every parameter from the counter-based RNG (GPT-2 initialization);
  // each rank fills its slices of the global tensors, so any layout starts
  // from the same weights.
  void init_parameters(uint64_t seed);
  ComputePrecision compute() const { return compute_; }
  // bf16 / fp16: rounds the fp32 (master) parameters into the 16-bit copy
  // the matrix products read. Call after the parameters change (an optimizer
  // step, a checkpoint load); init_parameters() calls it. No-op in fp32.
  void refresh_compute_weights();
  // The 16-bit weights (layout().total elements of compute_dtype(compute())),
  // laid out as params(): an optimizer may write them as it updates
  // (AdamW's WeightCopy). nullptr in fp32.
  void* compute_weights() { return weights16_ptr_; }

  float* params() { return params_ptr_; }
  float* grads() { return grads_ptr_; }
  int64_t params_size() const { return layout_.total; }
  float* param(int i) { return params() + layout_.params[i].offset; }
  float* grad(int i) { return grads() + layout_.params[i].offset; }

  // --- The whole model (embedding and head on this rank), slot 0. ---
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

  // --- One pipeline chunk, one micro-batch in activation slot `slot`. ---
  // Rows are this rank's rows of the micro-batch's B x T tokens (all of them
  // without sequence parallelism): local_rows(B*T) x d_model floats.
  int64_t local_rows(int64_t rows) const { return tp_.local_rows(rows); }
  // Without the embedding: fill this with the previous chunk's output first.
  float* stage_input(int slot) { return slots_[size_t(slot)].input; }
  // The blocks (after the embedding lookup on the first chunk; ln_f on the
  // last). The head's logits and loss wait for backward_stage.
  void forward_stage(int slot, const int32_t* tokens, int B, int T);
  // Without the head: the last block's output, for the next chunk.
  const float* stage_output(int slot) const;
  // Without the head: fill with the gradient of stage_output before
  // backward_stage. Afterwards, without the embedding: the gradient of
  // stage_input, for the previous chunk.
  float* stage_grad(int slot) { return slots_[size_t(slot)].dres; }
  // Backward of the micro-batch in `slot`. With the head: computes the
  // logits, the loss (returned: the mean over counted targets) and its
  // gradient scaled by loss_scale first; otherwise returns 0.
  float backward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale);
  // With the head, forward only: the mean loss of the micro-batch in `slot`.
  float stage_loss(int slot, const int32_t* targets, int B, int T);

  // Called during backward with a parameter's index as soon as its gradient
  // is final (nothing later in this backward writes it), in the order of the
  // layout; every parameter once per backward. Data parallelism starts a
  // bucket's reduction from it. An empty function: no calls.
  void set_grad_ready_hook(std::function<void(int param_index)> hook) { grad_ready_ = std::move(hook); }

  // Parameters whose gradients are partial sums over the tp ranks (sequence
  // parallelism: each rank sees only its rows); empty otherwise.
  std::vector<int> sequence_partial_grads() const;

  // [B,T,vocab_slice().rows] after forward(): this rank's vocabulary columns
  // (fp32 compute only; in bf16 / fp16 the model keeps them in 16 bits).
  const float* logits() const;
  const tp::VocabSlice& vocab_slice() const { return vocab_; }
  size_t activation_bytes() const { return acts_.size(); }
  size_t compute_weight_bytes() const {
    return compute_ == ComputePrecision::fp32 ? 0 : size_t(layout_.total) * 2;
  }
  // Seconds this rank spent waiting on tensor-parallel communication so far.
  double tp_comm_seconds() const { return tp_.exposed_seconds(); }

 private:
  // Activations kept for backward. The compute type A (float, bf16 or f16):
  // the products' inputs and what attention and GELU keep; fp32: the norm
  // statistics and the residual stream.
  struct LayerActs {
    void *ln1, *qkv, *atty, *att, *ln2, *fch, *fch_gelu;  // A
    float *ln1_mean, *ln1_rstd, *res2, *ln2_mean, *ln2_rstd, *res3;
  };
  struct Slot {
    float* input;  // [local, C]: the embedding's output or the received activation
    std::vector<LayerActs> layers;
    void* lnf;     // A
    float *lnf_mean, *lnf_rstd;
    float* dres;   // [local, C]: gradient of the residual stream, updated in place
  };
  void plan_activations(int B, int T, int slots);
  // Calls f(A{}) with the compute type.
  template <class F>
  decltype(auto) with_compute_type(F&& f);
  template <class A>
  const A* weight(int i) const;  // the compute copy of parameter i
  template <class A>
  void forward_impl(int slot, const int32_t* tokens, int B, int T);
  template <class A>
  float backward_impl(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale);
  template <class A>
  void head_logits(Slot& s, int N);
  void grad_ready(int i) const {
    if (grad_ready_) grad_ready_(i);
  }

  GPTConfig cfg_;
  ParamLayout layout_;
  TensorParallel tp_;
  tp::VocabSlice vocab_;
  ComputePrecision compute_;
  int maxB_, maxT_;
  Arena params_, grads_, weights16_, acts_;
  float* params_ptr_ = nullptr;
  void* weights16_ptr_ = nullptr;  // weights16_ or the buffer given to the constructor
  float* grads_ptr_ = nullptr;  // grads_ or the buffer given to the constructor
  std::function<void(int)> grad_ready_;
  cpu::LowpMatmulEngine matmul_;

  std::vector<Slot> slots_;
  // Shared by the slots (used within one action). fp32 unless marked A.
  void* logits_;  // A: the head's product; the loss's gradient in place in backward
  float *losses_, *xent_scratch_;
  void* lnf_full_ = nullptr;   // A, [N, C]: ln_f gathered (sequence parallel)
  void* gathered_ = nullptr;   // A, [N, C]: norm outputs gathered (sequence parallel)
  float* grad_work_ = nullptr; // [N, C]: partial sums / gathered gradients (sequence parallel)
  float *dbuf_c_, *datty_, *dbuf_4c_, *datt_;
  void* dbuf_3c_;  // A: attention's input gradient
  void* dfch_;     // A: GELU's input gradient (fp32: dbuf_4c_ itself)
  // 16-bit compute only: the residual gradient rounded for the row-parallel
  // products ([local, C], gathered to [N, C] with sequence parallelism) and
  // attention's work space.
  void *dres16_ = nullptr, *dres16_full_ = nullptr;
  float* attn_work_ = nullptr;
};

}  // namespace loom
