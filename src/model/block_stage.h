// The stage module of a family whose chunk is a stack of blocks between the
// shared embedding and head (both families today). The family supplies, as
// one type of static members (model/gpt2/gpt2_stage.cpp,
// model/llama/llama_stage.cpp):
//   Tensors      its layout's indices (with `blocks`, one BlockTensors each)
//   BlockActs    what a block keeps for backward (`res3`: its output, fp32;
//                `qkv`, `atty`, `att`: attention's input, output and
//                probabilities, which selective recomputation drops and
//                makes again with attention_again)
//   NormActs     the final norm's statistics for one slot
//   State        what its blocks share besides parameters (LLaMA: the
//                rotary tables), made from (cfg, positions in a sequence)
//   shared(t)            the tensors TransformerStage needs
//   plan_block, plan_block_work, plan_norm   activations and work space
//   block_forward<A>, block_backward<A>      one block (plain functions);
//   block_backward_weight<A>                 the weight part of a split backward
//   norm_forward<A>, norm_backward, norm_tensors   the final norm
//
// Recomputation (model/recompute.h) is the block plan rewired: the buffers a
// mode drops point, in every slot and block, into one scratch block's; before
// a block's backward the stage runs attention_again (selective) or the whole
// block_forward from its stored input (full) into them again.
#pragma once

#include <vector>

#include "model/block_context.h"
#include "model/transformer_stage.h"

namespace loom {

template <class Family>
class BlockStage final : public TransformerStage {
 public:
  BlockStage(const ModelConfig& cfg, ParamLayout layout, typename Family::Tensors tensors, const ModelShard& shard,
             const TensorParallel& tp, int B, int T, const StageBuffers& buffers)
      : TransformerStage(cfg, std::move(layout), Family::shared(tensors), shard, tp, B, T, buffers),
        t_(std::move(tensors)),
        norm_tensors_(Family::norm_tensors(t_)),
        state_(ops(), cfg, T * split().cp) {
    plan(B, T, buffers.slots);
  }

 private:
  struct SlotActs {
    std::vector<typename Family::BlockActs> blocks;
    typename Family::NormActs norm;
  };

  void plan_family(ActivationPlan& plan, int B, int T, int slots) override {
    const int64_t R = tp_.local_rows(int64_t(B) * T);
    const size_t a = act_bytes();
    const int ep = layout_.shard.ep_size;
    // The tiled attention keeps no probabilities: selective recomputation has nothing to drop.
    const bool recompute = (recompute_ == Recompute::full || (recompute_ == Recompute::selective && !attn_.tiled())) &&
                           !t_.blocks.empty();
    // The scratch block whose buffers the dropped tensors share.
    const size_t scratch = plan.size();
    if (recompute) Family::plan_block(plan, scratch_, cfg_, tp_, B, T, a, attn_.tiled(), ep);
    std::vector<bool> shared(plan.size() - scratch, false);  // scratch buffers some block uses
    acts_.resize(size_t(slots));
    for (size_t k = 0; k < acts_.size(); k++) {
      SlotActs& s = acts_[k];
      plan.set_region(int(k));
      s.blocks.resize(t_.blocks.size());
      for (auto& b : s.blocks) {
        const size_t first = plan.size();
        Family::plan_block(plan, b, cfg_, tp_, B, T, a, attn_.tiled(), ep);
        if (recompute)
          for (size_t i = first; i < plan.size(); i++)
            if (dropped(b, plan.pointer(i))) plan.alias(i, scratch + (i - first)), shared[i - first] = true;
      }
      if (layout_.shard.head) Family::plan_norm(plan, s.norm, size_t(R));
    }
    plan.set_region(ActivationPlan::kWork);
    for (size_t i = 0; i < shared.size(); i++)
      if (!shared[i]) plan.drop(scratch + i);
    Family::plan_block_work(plan, work_, cfg_, tp_, B, T, a, attn_.tiled(), ep);
  }

  // Whether recomputation drops block b's buffer *p (full: all but its output,
  // the next block's input; selective: the attention core).
  bool dropped(typename Family::BlockActs& b, void** p) const {
    if (recompute_ == Recompute::full) return p != reinterpret_cast<void**>(&b.res3);
    return p == reinterpret_cast<void**>(&b.att);
  }

  BlockContext context(int slot, int B, int T) {
    work_.gathered = gathered_, work_.grad_work = grad_work_, work_.dnorm = dbuf_c_;
    work_.dres16 = dres16_, work_.dres16_full = dres16_full_;
    Family::finish_work(work_, compute_);
    BlockContext ctx{ops_, attn_, tp_, cfg_, access_, work_, ready_hook(), B, T, token_positions(slot),
                     doc_starts(slot)};
    ctx.router = router_.get(), ctx.cp_group = cp_group_, ctx.ep_group = ep_group_, ctx.slot = slot;
    return ctx;
  }

  const float* forward_blocks(int slot, int B, int T) override {
    const BlockContext ctx = context(slot, B, T);
    SlotActs& s = acts_[size_t(slot)];
    const float* res = slot_input(slot);
    with_compute_type([&](auto a) {
      for (size_t l = 0; l < s.blocks.size(); l++) {
        use(block_unit(l), after_block(l));
        Family::template block_forward<decltype(a)>(ctx, state_, t_.blocks[l], s.blocks[l], res);
        done(block_unit(l));
        res = s.blocks[l].res3;
      }
    });
    return res;
  }

  void backward_blocks(int slot, int B, int T, bool split) override {
    const BlockContext ctx = context(slot, B, T);
    SlotActs& s = acts_[size_t(slot)];
    float* dres = slot_dres(slot);
    with_compute_type([&](auto a) {
      using A = decltype(a);
      for (int l = int(s.blocks.size()) - 1; l >= 0; l--) {
        const float* in = l > 0 ? s.blocks[size_t(l - 1)].res3 : slot_input(slot);
        auto& acts = s.blocks[size_t(l)];
        use(block_unit(size_t(l)), before_block(size_t(l)));
        // The same kernels on the same inputs: bitwise what forward stored
        // (the block's own output is rewritten with the values it holds).
        if (recompute_ == Recompute::full) Family::template block_forward<A>(ctx, state_, t_.blocks[size_t(l)], acts, in);
        if (recompute_ == Recompute::selective && !attn_.tiled())
          attention_again<A>(ctx, acts.atty, acts.att, acts.qkv);
        Family::template block_backward<A>(ctx, state_, t_.blocks[size_t(l)], acts, in, dres, split);
        done(block_unit(size_t(l)));
      }
    });
  }

  // Reads no parameter (the products' stored inputs and kept output
  // gradients only): nothing to gather under ZeRO-3.
  void backward_blocks_weight(int slot, int B, int T) override {
    const BlockContext ctx = context(slot, B, T);
    SlotActs& s = acts_[size_t(slot)];
    with_compute_type([&](auto a) {
      for (int l = int(s.blocks.size()) - 1; l >= 0; l--)
        Family::template block_backward_weight<decltype(a)>(ctx, state_, t_.blocks[size_t(l)], s.blocks[size_t(l)]);
    });
  }

  void final_norm_forward(int slot, const float* res, int R) override {
    with_compute_type([&](auto a) {
      using A = decltype(a);
      Family::template norm_forward<A>(ops_, cfg_, access_, t_, acts_[size_t(slot)].norm,
                                       static_cast<A*>(head_input(slot)), res, R);
    });
  }

  void final_norm_backward(int slot, float* dres, const float* dnorm, const float* res, int R) override {
    Family::norm_backward(ops_, cfg_, access_, t_, acts_[size_t(slot)].norm, dres, dnorm, res, R);
    for (int i : norm_tensors_) grad_ready(i);
  }

  typename Family::Tensors t_;
  // The final norm's tensors, reported ready after its backward (listed once,
  // so that a step allocates nothing).
  std::vector<int> norm_tensors_;
  typename Family::State state_;
  std::vector<SlotActs> acts_;
  typename Family::BlockActs scratch_{};  // recomputation: the dropped tensors' one set of buffers
  BlockWork work_;
};

}  // namespace loom
