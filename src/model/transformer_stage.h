// What every family's stage module shares: the buffers (fp32 parameters and
// gradients, the 16-bit weight copy), the activation slots, the token
// embedding (vocabulary-parallel, with an optional position table), the LM
// head (tied or not) and the loss, the gradient-ready hook. A family adds its
// blocks and its final norm through the hooks below (model/gpt2/,
// model/llama/), each dispatching on the compute type once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "model/activation_plan.h"
#include "model/attention.h"
#include "model/moe/router_state.h"
#include "model/stage_module.h"
#include "parallel/cp/ring_attention.h"

namespace loom {

// Reads a shard's parameters: fp32 masters, the compute copy, gradients.
// Parameter groups (a ParamSource): each tensor's own address instead of
// base + offset; a frozen tensor's gradient address is nullptr (none is
// computed).
struct ParamAccess {
  const ParamLayout* layout;
  float* params;
  void* weights16;
  float* grads;
  const std::vector<float*>* params_at = nullptr;
  const std::vector<void*>* weights_at = nullptr;
  const std::vector<float*>* grads_at = nullptr;
  // i < 0 (a tensor the model does not have, e.g. an absent bias): nullptr.
  float* param(int i) const {
    if (i < 0) return nullptr;
    return params_at ? (*params_at)[size_t(i)] : params + layout->params[size_t(i)].offset;
  }
  float* grad(int i) const {
    if (i < 0) return nullptr;
    return grads_at ? (*grads_at)[size_t(i)] : grads + layout->params[size_t(i)].offset;
  }
  template <class A>
  const A* weight(int i) const {
    if constexpr (std::is_same_v<A, float>)
      return param(i);
    else if (weights_at)
      return static_cast<const A*>((*weights_at)[size_t(i)]);
    else
      return static_cast<const A*>(weights16) + layout->params[size_t(i)].offset;
  }
};

class TransformerStage : public StageModule {
 public:
  // The tensors the shared parts use (indices into layout.params; -1: none).
  struct SharedTensors {
    int embed = -1;     // token table (this shard holds the embedding or a tied head)
    int positions = -1; // learned position table (GPT-2)
    int head = -1;      // LM head weight: embed when tied
  };

  const ModelConfig& config() const override { return cfg_; }
  const ParamLayout& layout() const override { return layout_; }
  ComputePrecision compute() const override { return compute_; }
  void init_parameters(uint64_t seed) override;
  void refresh_compute_weights() override;
  float* params() override { return access_.params; }
  float* grads() override { return access_.grads; }
  float* grad(int i) override { return access_.grad(i); }
  void* compute_weights() override { return access_.weights16; }
  int64_t local_rows(int64_t rows) const override { return tp_.local_rows(rows); }
  float* stage_input(int slot) override { return slots_[size_t(slot)].input; }
  const float* stage_output(int slot) const override { return slots_[size_t(slot)].output; }
  float* stage_grad(int slot) override { return slots_[size_t(slot)].dres; }
  void set_documents(int slot, const int32_t* positions, int B, int T) override;
  void forward_stage(int slot, const int32_t* tokens, int B, int T) override;
  double backward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                        float target_weight) override;
  double backward_input(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                        float target_weight) override;
  void backward_weight(int slot, int B, int T) override;
  double stage_loss(int slot, const int32_t* targets, int B, int T) override;
  void set_grad_ready_hook(std::function<void(int)> hook) override { grad_ready_ = std::move(hook); }
  const float* logits() const override;
  std::vector<float> logits_f32(int64_t rows) const override;
  const tp::VocabSlice& vocab_slice() const override { return vocab_; }
  // The planned buffers and 16-bit attention's per-thread scratch.
  // With shared activations the stage's pool counts every chunk's buffers
  // (its own region too): the module adds its attention scratch alone.
  size_t activation_bytes() const override {
    if (plan_only_) return planned_bytes_;
    return (shared_acts_ ? 0 : acts_.size()) + attn_.work_bytes();
  }
  size_t compute_weight_bytes() const override {
    return compute_ == ComputePrecision::fp32 ? 0 : size_t(layout_.total) * 2;
  }
  double tp_comm_seconds() const override { return tp_.exposed_seconds(); }
  moe::RouterState* router_state() override { return router_.get(); }

 protected:
  // Checks the shard against the group and allocates the parameter buffers;
  // the family then calls plan(): its constructor is the place to do so.
  TransformerStage(const ModelConfig& cfg, ParamLayout layout, SharedTensors shared, const ModelShard& shard,
                   const TensorParallel& tp, int B, int T, const StageBuffers& buffers);
  // Plans the shared activations and the family's (plan_family), then
  // allocates them all at once.
  void plan(int B, int T, int slots);

  // --- Family hooks. ---
  // Adds the family's activations: per slot (its blocks and final-norm
  // statistics) and shared scratch. N = B x T rows, R = local rows.
  virtual void plan_family(ActivationPlan& plan, int B, int T, int slots) = 0;
  // The blocks on slot's input; returns their output (fp32 [R, C]).
  virtual const float* forward_blocks(int slot, int B, int T) = 0;
  // The final norm of `res` into head_input(slot) (compute type, [R, C]).
  virtual void final_norm_forward(int slot, const float* res, int R) = 0;
  // dres[R, C] += the final norm's input gradient from dnorm[R, C] (fp32);
  // its weight gradients, reported ready.
  virtual void final_norm_backward(int slot, float* dres, const float* dnorm, const float* res, int R) = 0;
  // The blocks' backward, the slot's residual gradient updated in place;
  // split: without the products' weight gradients, which
  // backward_blocks_weight adds later.
  virtual void backward_blocks(int slot, int B, int T, bool split) = 0;
  virtual void backward_blocks_weight(int slot, int B, int T) = 0;

  // ZeRO-3 (a ParamSource): the tensors each part reads, gathered before
  // and released after; no-ops otherwise.
  void use(const std::vector<int>& unit, const std::vector<int>& then = {}) {
    if (source_ && !unit.empty()) source_->acquire(unit, then);
  }
  void done(const std::vector<int>& unit) {
    if (source_ && !unit.empty()) source_->release(unit);
  }
  const std::vector<int>& block_unit(size_t l) const { return unit_block_[l]; }
  // What the stage reads after block l's forward (the next block, else the final norm) / before its backward.
  const std::vector<int>& after_block(size_t l) const {
    return l + 1 < unit_block_.size() ? unit_block_[l + 1] : unit_norm_;
  }
  const std::vector<int>& before_block(size_t l) const { return l > 0 ? unit_block_[l - 1] : no_unit_; }

  // Calls f(A{}) with the compute type.
  template <class F>
  decltype(auto) with_compute_type(F&& f) {
    switch (compute_) {
      case ComputePrecision::bf16: return f(bf16{});
      case ComputePrecision::fp16: return f(f16{});
      default: return f(float{});
    }
  }
  void grad_ready(int i) const {
    if (grad_ready_) grad_ready_(i);
  }
  const std::function<void(int)>& ready_hook() const { return grad_ready_; }
  void* head_input(int slot) { return slots_[size_t(slot)].head_in; }
  const float* slot_input(int slot) const { return slots_[size_t(slot)].input; }
  float* slot_dres(int slot) { return slots_[size_t(slot)].dres; }
  Backend& ops() { return ops_; }
  const SequenceSplit& split() const { return split_; }
  // Per token row of the slot's micro-batch: its position (null: n % T) and,
  // packed, its document's start (null: one document a row).
  const int32_t* token_positions(int slot) const {
    const Documents& d = docs_[size_t(slot)];
    return d.packed ? d.pos.data() : positions_.empty() ? nullptr : positions_.data();
  }
  const int32_t* doc_starts(int slot) const {
    const Documents& d = docs_[size_t(slot)];
    return d.packed ? d.start.data() : nullptr;
  }
  size_t act_bytes() const { return dtype_size(compute_dtype(compute_)); }  // of a compute-type element

  ModelConfig cfg_;
  ParamLayout layout_;
  SharedTensors shared_;
  TensorParallel tp_;
  tp::VocabSlice vocab_;
  ComputePrecision compute_;
  Recompute recompute_;
  bool plan_only_;
  size_t planned_bytes_ = 0, attention_work_bytes_ = 0;  // plan_only
  std::unique_ptr<Backend> own_ops_;  // a standalone stage's own backend
  Backend& ops_;
  SequenceSplit split_;
  std::vector<int32_t> positions_;  // context parallelism: each local token row's global position [maxB * T]
  struct Documents {                // packed rows, per slot: each token row's
    bool packed = false;
    std::vector<int32_t> pos, start;  // position in its document; the document's start (global)
  };
  std::vector<Documents> docs_;
  std::unique_ptr<RingAttention> ring_;
  Communicator* cp_group_ = nullptr;
  Communicator* ep_group_ = nullptr;  // expert parallelism (ep > 1)
  std::unique_ptr<moe::RouterState> router_;  // MoE layers only
  Attention attn_;
  ParamAccess access_{};
  int maxB_, maxT_, slot_count_;
  // Shared work space (fp32 unless marked A), used within one action.
  void* gathered_ = nullptr;   // A, [N, C]: norm outputs gathered (sequence parallel)
  float* grad_work_ = nullptr; // [N, C]: partial sums / gathered gradients (sequence parallel)
  float* dbuf_c_ = nullptr;    // [R, C]: a norm's output gradient
  // 16-bit compute only: the residual gradient rounded for the row-parallel
  // products ([R, C], gathered to [N, C] with sequence parallelism).
  void *dres16_ = nullptr, *dres16_full_ = nullptr;

 private:
  struct Slot {
    float* input;     // [R, C]: the embedding's output or the received activation
    const float* output = nullptr;  // [R, C]: the blocks' output (set by forward)
    void* head_in;    // A, [R, C]: the final norm's output (head chunk)
    float* dres;      // [R, C]: gradient of the residual stream, updated in place
  };
  double backward_pass(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float target_weight,
                      bool split);
  void embedding_backward(int slot, const int32_t* tokens, int B, int T);
  static constexpr int64_t kHeadChunkBytes = int64_t(32) << 20;  // of logits in the compute type
  int head_chunk_rows(int N) const;
  template <class A>
  const A* head_input_rows(int slot, int N);  // [N, C]: gathered with sequence parallelism
  template <class A>
  void head_logits(const A* x, int rows);

  ParamSource* source_;
  SharedActivations* shared_acts_;  // the stage's pool, or nullptr: acts_ below
  // ZeRO-3 units: the token (and position) table, each block, the final
  // norm, the head (the token table when tied).
  std::vector<int> unit_embed_, unit_norm_, unit_head_, unit_norm_head_, no_unit_;
  std::vector<std::vector<int>> unit_block_;
  Arena params_, grads_, weights16_, acts_;
  std::function<void(int)> grad_ready_;
  std::vector<Slot> slots_;
  void* logits_ = nullptr;  // A: the head's product; the loss's gradient in place in backward
  bool logits_whole_ = true;  // the last head product covered every row
  float *losses_ = nullptr, *xent_scratch_ = nullptr;
  void* head_in_full_ = nullptr;  // A, [N, C]: the head's input gathered (sequence parallel)
};

}  // namespace loom
