// What a block's forward and backward functions are given (model/<family>/
// *_block.h): the backend, the tensor-parallel group, the parameters, the
// shared work space, the micro-batch's shape and where to report finished
// gradients. Blocks are plain functions of these, so recomputation and new
// block types call them without the stage around them.
#pragma once

#include <cstring>
#include <functional>
#include <type_traits>

#include "kernels/backend.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/transformer_stage.h"

namespace loom {

class Communicator;
namespace moe {
class RouterState;
}

// Work space the blocks of a stage share (used within one action); fp32
// unless marked A (the compute type). Families size what they use.
struct BlockWork {
  void* gathered = nullptr;     // A, [N, C]: a norm's output gathered (sequence parallel)
  float* grad_work = nullptr;   // [N, C]: partial sums / gathered gradients (sequence parallel)
  float* dnorm = nullptr;       // [R, C]: a norm's output gradient
  void* dres16 = nullptr;       // A, [R, C]: the residual gradient rounded (16-bit compute)
  void* dres16_full = nullptr;  // A, [N, C]: the same gathered (16-bit, sequence parallel)
  float* dattn_out = nullptr;   // [N, Cl]: attention output's gradient
  void* dqkv = nullptr;         // A, [N, qkv width]: attention's input gradient
  float* datt = nullptr;        // [B, NHl, T, T]: materialized attention's backward scratch
  float* dmlp_out = nullptr;    // [N, Fl]: the MLP activation's output gradient
  void* dmlp_in = nullptr;      // A, [N, Fl or 2 Fl]: the MLP activation's input gradient
  float* lora = nullptr;        // LoRA adapters' work space (model/lora/lora_block.h)
  // MoE blocks' backward (model/moe/moe_block.h): per (token, expert) pair.
  float *moe_dxp = nullptr, *moe_dhidden = nullptr, *moe_dlogits = nullptr;
  float* moe_seq = nullptr;  // [N, E]: per-sequence counts and balancing gradients
  float* moe_dy = nullptr;   // [N, C]: the output gradient gathered (sequence parallel)
  // The shared expert's backward: A [N, C] (its output's gradient), fp32
  // [N, Fs] (its hidden's), A [N, 2 Fs] (its gate/up's).
  void *moe_shared_dy = nullptr, *moe_shared_dgate_up = nullptr;
  float* moe_shared_dhidden = nullptr;
  void *moe_dyp = nullptr, *moe_dgate_up = nullptr;  // A
  // Expert parallelism: A [pairs, C] (the routed rows to send: tokens, then
  // output gradients), fp32 [ep x pairs, C] (the all-to-all's staging),
  // fp32 [P, C] (the local experts' outputs; backward: the input gradients
  // back at their routing rows).
  void* moe_send = nullptr;
  float *moe_stage = nullptr, *moe_local = nullptr;
};

struct BlockContext {
  CpuBackend& ops;
  Attention& attn;
  const TensorParallel& tp;
  const ModelConfig& cfg;
  const ParamAccess& p;
  const BlockWork& work;
  const std::function<void(int)>& ready;  // reports a finished gradient (may be empty)
  int B, T;
  // Per token row [N]: its position (rope's table row; null: n % T) and,
  // with packed rows, its document's start (attention's mask; null: none).
  const int32_t* pos = nullptr;
  const int32_t* doc = nullptr;
  // Mixture of experts: the stage's router state (bias, step counts, the
  // router losses' weight), the context-parallel group a sequence's tokens
  // are spread over (per-sequence balancing sums over it), the
  // expert-parallel group, and the micro-batch's activation slot.
  moe::RouterState* router = nullptr;
  Communicator* cp_group = nullptr;
  Communicator* ep_group = nullptr;  // expert parallelism: the ranks the experts are spread over (null: ep 1)
  int slot = 0;
  int N() const { return B * T; }
  int R() const { return int(tp.local_rows(int64_t(B) * T)); }
  void grad_ready(int i) const {
    if (ready && i >= 0) ready(i);
  }
};

// Zero-bubble schedules' split backward: keeps n elements of a product's
// output gradient (B's) for the block's weight pass (W) in one of the
// block's stored buffers that B has finished reading.
template <class T>
void stash_w(void* to, const T* from, size_t n) {
  std::memcpy(to, from, n * sizeof(T));
}

// Selective recomputation: attention's output atty[N, Cl] and what it keeps
// for backward (att) again from the block's stored q/k/v (after any
// rotation), with the kernel forward ran; both families' attention core.
template <class A>
void attention_again(const BlockContext& ctx, void* atty, void* att, const void* qkv) {
  const int t = ctx.tp.size();
  ctx.attn.forward(static_cast<A*>(atty), att, static_cast<const A*>(qkv), ctx.B, ctx.T, ctx.cfg.d_model / t,
                   ctx.cfg.n_head / t, ctx.cfg.kv_heads() / t, ctx.doc);
}

// The residual gradient dres[R, C] as a block's row-parallel backward reads
// it: dres itself in fp32; in 16 bits rounded into work.dres16 (and, with
// sequence parallelism, gathered into work.dres16_full by the product).
template <class A>
class ResidualGrad {
 public:
  ResidualGrad(const BlockContext& ctx, float* dres) : ctx_(ctx), dres_(dres) {
    if constexpr (std::is_same_v<A, float>) {
      local_ = dres, rows_ = ctx.work.grad_work;
    } else {
      local_ = static_cast<A*>(ctx.work.dres16), rows_ = static_cast<A*>(ctx.work.dres16_full);
    }
  }
  // Before each row-parallel backward: dres changed since the last one.
  void refresh() const {
    if constexpr (!std::is_same_v<A, float>) ctx_.ops.round_to(local_, dres_, size_t(ctx_.R()) * ctx_.cfg.d_model);
  }
  A* local() const { return local_; }  // [R, C]
  A* rows() const { return rows_; }    // [N, C] work space for the gathered rows

 private:
  const BlockContext& ctx_;
  float* dres_;
  A *local_, *rows_;
};

}  // namespace loom
