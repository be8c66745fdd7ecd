// The model interface the train loop and the pipeline executor drive: one
// rank's shard of the model (a StageModule) — all of it on one process, its
// tensor-parallel slices, and/or one pipeline chunk (a range of blocks, with
// the embedding on the first chunk and the final norm + LM head on the
// last) — implemented once per family (model/gpt2/, model/llama/), made by
// make_stage_module() from the config's family.
//
// Parameters and gradients each live in one allocation laid out by the
// family's ParamLayout (whose per-tensor flags declare what train/ must do
// across ranks: sequence-partial gradients, tensors tied across stages);
// activations are planned and allocated once at construction, in `slots`
// sets (a pipeline stage holds several micro-batches in flight), so a
// training step allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/activation_plan.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "parallel/cp/sequence_split.h"
#include "parallel/tp/tensor_parallel.h"
#include "parallel/tp/vocab_parallel.h"
#include "precision/policy.h"

namespace loom {

class Communicator;
namespace moe {
class RouterState;
}

// Parameters that live in buffers of their own, tensor by tensor (the
// parameter groups of train/; under ZeRO-3 sharded elsewhere and present
// only while in use). The module announces the tensors (its layout's
// indices) it is about to read, with those it reads after them (to gather
// ahead), and releases them when done; meanwhile they are at the addresses
// below.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void acquire(const std::vector<int>& tensors, const std::vector<int>& then) = 0;
  virtual void release(const std::vector<int>& tensors) = 0;
  // Per layout tensor: its fp32 values, and (bf16 / fp16) its 16-bit copy.
  virtual const std::vector<float*>& tensor_params() const = 0;
  virtual const std::vector<void*>& tensor_weights() const = 0;
  // Per layout tensor: where its gradient is added (nullptr: a frozen
  // tensor, whose gradient is never computed); nullptr: StageBuffers::grads.
  virtual const std::vector<float*>* tensor_grads() const { return nullptr; }
};

// What a model stage is built with, by concern; StageBuffers joins them.

// Where the stage's tensors live; nullptr: the model allocates its own.
struct StageMemory {
  float* params = nullptr;  // at least layout().total floats
  float* grads = nullptr;   // at least layout().total floats, zeroed (e.g. a data-parallel gradient buffer)
  int64_t param_floats = 0;  // own parameter buffer's size when more than the layout's (ZeRO padding)
  int slots = 1;             // activation sets (micro-batches in flight)
  // bf16 / fp16: where the 16-bit weights live (layout().total elements);
  // nullptr: the model allocates them.
  void* weights16 = nullptr;
  // Plan the activations but allocate nothing (no parameters either): the
  // module answers activation_bytes() only. planned_activation_bytes() uses it.
  bool plan_only = false;
  // Parameters (and, when it gives them, gradients) come from here, tensor
  // by tensor (params and weights16 are then unused and nothing is
  // allocated for them).
  ParamSource* source = nullptr;
  // plan_only: size 16-bit attention's per-thread scratch for this many
  // threads (0: this process's OpenMP threads, as a real module does).
  int plan_threads = 0;
  // A pipeline stage's chunks sharing their activation slots and work
  // space (model/activation_plan.h): the module enrolls its plan there and
  // its buffers exist once the pool is allocated; slot k is then the same
  // memory in every chunk (the executor gives it to one chunk at a time).
  SharedActivations* shared_activations = nullptr;
};

// How the stage computes.
struct StageNumerics {
  // bf16 / fp16: matrix products read a 16-bit copy of the weights and the
  // activations kept for backward are 16-bit (docs/precision.md lists which).
  ComputePrecision compute = ComputePrecision::fp32;
  // What each block keeps for its backward (model/recompute.h).
  Recompute recompute = Recompute::none;
  // The process's backend (kernels/backend.h): its kernels and memory;
  // nullptr: the stage makes its own (a standalone model).
  Backend* backend = nullptr;
};

// The groups the stage's own layers talk over.
struct StageGroups {
  // Context parallelism (parallel/cp/): the module's T rows per sequence
  // are this rank's two chunks of a cp-times longer sequence, run at their
  // global positions, with attention over the ring of `cp_group` (needed
  // unless plan_only).
  SequenceSplit split;
  Communicator* cp_group = nullptr;
  // Expert parallelism: the ep group the MoE blocks exchange tokens over
  // (its size the shard's ep_size; needed when that is > 1 unless plan_only).
  Communicator* ep_group = nullptr;
};

struct StageBuffers : StageMemory, StageNumerics, StageGroups {};

// Targets >= 0 among targets[n]: the ones a loss counts.
int64_t count_valid_targets(const int32_t* targets, int64_t n);

class StageModule {
 public:
  virtual ~StageModule() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual ComputePrecision compute() const = 0;

  // Fills every parameter from the counter-based RNG; each rank fills its
  // slices of the global tensors, so any layout starts from the same weights.
  virtual void init_parameters(uint64_t seed) = 0;
  // bf16 / fp16: rounds the fp32 (master) parameters into the 16-bit copy
  // the matrix products read. Call after the parameters change. No-op in fp32.
  virtual void refresh_compute_weights() = 0;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  // The 16-bit weights (layout().total elements of compute_dtype(compute())),
  // laid out as params(): an optimizer may write them as it updates
  // (AdamW's WeightCopy). nullptr in fp32.
  virtual void* compute_weights() = 0;
  float* param(int i) { return params() + layout().params[size_t(i)].offset; }
  // Where tensor i's gradient is added (nullptr: frozen).
  virtual float* grad(int i) { return grads() + layout().params[size_t(i)].offset; }
  int64_t params_size() const { return layout().total; }
  void zero_grads();

  // --- One pipeline chunk, one micro-batch in activation slot `slot`. ---
  // Rows are this rank's rows of the micro-batch's B x T tokens (all of them
  // without sequence parallelism): local_rows(B*T) x d_model floats.
  virtual int64_t local_rows(int64_t rows) const = 0;
  // Without the embedding: fill this with the previous chunk's output first.
  virtual float* stage_input(int slot) = 0;
  // Packed rows (several documents a row, none attending to another):
  // positions[B*T] give each of this rank's token rows of the micro-batch
  // (after the context-parallel split) its position in its document, which
  // starts at its global position minus that; nullptr: one sequence a row.
  // Set before forward_stage of the slot; kept until its backward.
  virtual void set_documents(int slot, const int32_t* positions, int B, int T) = 0;
  // The blocks (after the embedding lookup on the first chunk; the final norm
  // on the last). The head's logits and loss wait for backward_stage.
  virtual void forward_stage(int slot, const int32_t* tokens, int B, int T) = 0;
  // Without the head: the last block's output, for the next chunk.
  virtual const float* stage_output(int slot) const = 0;
  // Without the head: fill with the gradient of stage_output before
  // backward_stage. Afterwards, without the embedding: the gradient of
  // stage_input, for the previous chunk.
  virtual float* stage_grad(int slot) = 0;
  // Backward of the micro-batch in `slot`; gradients are *added* to grads().
  // With the head: computes the logits, the losses of the counted targets
  // (a target < 0 is ignored) and their gradient, each counted target's loss
  // weighted by target_weight (the train loop passes the loss scaler's scale
  // over the number of valid targets in the whole global batch, so the
  // gradients are those of the batch's mean loss in every layout); returns
  // the *sum* of the counted targets' losses (0 without the head).
  virtual double backward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                float target_weight) = 0;
  // Zero-bubble schedules split backward_stage in two, with bitwise the same
  // gradients: backward_input (the loss with the head, the gradient of
  // stage_input in stage_grad; the norms', the head's and the embedding's
  // weight gradients) and later backward_weight (the weight gradients of
  // the blocks' matrix products). The slot's activations are kept until then; what the
  // weight pass reads lives in buffers the input pass is done with, so the
  // split costs no memory. Not with train.recompute = "full".
  virtual double backward_input(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                float target_weight) = 0;
  virtual void backward_weight(int slot, int B, int T) = 0;
  // With the head, forward only: the sum of the counted targets' losses of
  // the micro-batch in `slot`.
  virtual double stage_loss(int slot, const int32_t* targets, int B, int T) = 0;

  // --- The whole model (embedding and head on this rank), slot 0. ---
  // The mean loss over the batch's valid targets (0 when none is); backward
  // scales that mean's gradient by loss_scale.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale = 1.f);

  // Called during backward with a parameter's index as soon as its gradient
  // is final (nothing later in this backward writes it); every parameter
  // once per backward. Data parallelism starts a bucket's reduction from it.
  virtual void set_grad_ready_hook(std::function<void(int param_index)> hook) = 0;

  // [B,T,vocab_slice().rows] after forward(): this rank's vocabulary columns
  // (fp32 compute only).
  virtual const float* logits() const = 0;
  // The first `rows` rows of the logits ([rows, vocab_slice().rows]) in
  // fp32 whatever the compute precision (a bf16 / fp16 model keeps them in
  // 16 bits: widened here).
  virtual std::vector<float> logits_f32(int64_t rows) const = 0;
  virtual const tp::VocabSlice& vocab_slice() const = 0;
  virtual size_t activation_bytes() const = 0;
  virtual size_t compute_weight_bytes() const = 0;
  // A mixture of experts: the chunk's MoE layers' balancing state and step
  // statistics (nullptr: a dense chunk).
  virtual moe::RouterState* router_state() { return nullptr; }
  // Seconds this rank spent waiting on tensor-parallel communication so far.
  virtual double tp_comm_seconds() const = 0;
};

// The family's stage module for `shard` (tp: this rank's tensor-parallel
// group; shard.tp_rank/tp_size must match it). B, T: the largest batch and
// sequence length a forward will be given.
std::unique_ptr<StageModule> make_stage_module(const ModelConfig& cfg, const ModelShard& shard,
                                               const TensorParallel& tp, int B, int T,
                                               const StageBuffers& buffers = {});
// The activation memory make_stage_module() would allocate for `shard` (the
// stored tensors of `slots` micro-batches in flight, the work space, and
// 16-bit attention's per-thread scratch for `threads` threads, 0: this
// process's), computed from the same plan without allocating: what the
// planner sums, and what the module's activation_bytes() reports. cp > 1:
// context parallelism, T the rank's rows of each sequence (seq_len / cp).
size_t planned_activation_bytes(const ModelConfig& cfg, const ModelShard& shard, int B, int T, int slots,
                                ComputePrecision compute, Recompute recompute, int threads = 0, int cp = 1);
// The same for a stage's chunks sharing `slots` activation sets and their
// work space (StageBuffers::shared_activations), all of them together.
size_t planned_shared_activation_bytes(const ModelConfig& cfg, const std::vector<ModelShard>& chunks, int B, int T,
                                       int slots, ComputePrecision compute, Recompute recompute, int threads = 0,
                                       int cp = 1);
// The whole model on one process.
std::unique_ptr<StageModule> make_model(const ModelConfig& cfg, int B, int T, float* grad_buffer = nullptr,
                                        int64_t param_floats = 0);

}  // namespace loom
