#include "model/gpt2/gpt2_stage.h"

namespace loom::gpt2 {
namespace {

class Gpt2Stage final : public TransformerStage {
 public:
  Gpt2Stage(const ModelConfig& cfg, ParamLayout layout, Tensors tensors, const ModelShard& shard,
            const TensorParallel& tp, int B, int T, const StageBuffers& buffers)
      : TransformerStage(cfg, std::move(layout), {tensors.wte, tensors.wpe, tensors.wte}, shard, tp, B, T, buffers),
        t_(std::move(tensors)) {
    plan(B, T, buffers.slots);
  }

 private:
  struct SlotActs {
    std::vector<BlockActs> blocks;
    float *lnf_mean = nullptr, *lnf_rstd = nullptr;
  };

  void plan_family(ActivationPlan& plan, int B, int T, int slots) override {
    const size_t R = size_t(tp_.local_rows(int64_t(B) * T)), a = act_bytes();
    acts_.resize(size_t(slots));
    for (SlotActs& s : acts_) {
      s.blocks.resize(t_.blocks.size());
      for (BlockActs& b : s.blocks) plan_block(plan, b, cfg_, tp_, B, T, a);
      if (layout_.shard.head) plan.want(&s.lnf_mean, R), plan.want(&s.lnf_rstd, R);
    }
    plan_block_work(plan, work_, cfg_, tp_, B, T, a);
  }

  void finish_work() {
    work_.gathered = gathered_, work_.grad_work = grad_work_, work_.dnorm = dbuf_c_;
    work_.dres16 = dres16_, work_.dres16_full = dres16_full_;
    if (compute_ == ComputePrecision::fp32) work_.dmlp_in = work_.dmlp_out;  // GELU's backward in place
  }

  BlockContext context(int B, int T) {
    finish_work();
    return BlockContext{ops_, tp_, cfg_, access_, work_, ready_hook(), B, T};
  }

  const float* forward_blocks(int slot, int B, int T) override {
    const BlockContext ctx = context(B, T);
    SlotActs& s = acts_[size_t(slot)];
    const float* res = slot_input(slot);
    with_compute_type([&](auto a) {
      using A = decltype(a);
      for (size_t l = 0; l < s.blocks.size(); l++) {
        block_forward<A>(ctx, t_.blocks[l], s.blocks[l], res);
        res = s.blocks[l].res3;
      }
    });
    return res;
  }

  void final_norm_forward(int slot, const float* res, int R) override {
    SlotActs& s = acts_[size_t(slot)];
    with_compute_type([&](auto a) {
      using A = decltype(a);
      ops_.layernorm_forward(static_cast<A*>(head_input(slot)), s.lnf_mean, s.lnf_rstd, res,
                             access_.param(t_.lnf_w), access_.param(t_.lnf_b), R, cfg_.d_model);
    });
  }

  void final_norm_backward(int slot, float* dres, const float* dnorm, const float* res, int R) override {
    SlotActs& s = acts_[size_t(slot)];
    ops_.layernorm_backward(dres, access_.grad(t_.lnf_w), access_.grad(t_.lnf_b), dnorm, res,
                            access_.param(t_.lnf_w), s.lnf_mean, s.lnf_rstd, R, cfg_.d_model);
    grad_ready(t_.lnf_w), grad_ready(t_.lnf_b);
  }

  void backward_blocks(int slot, int B, int T) override {
    const BlockContext ctx = context(B, T);
    SlotActs& s = acts_[size_t(slot)];
    float* dres = slot_dres(slot);
    with_compute_type([&](auto a) {
      using A = decltype(a);
      for (int l = int(s.blocks.size()) - 1; l >= 0; l--) {
        const float* in = l > 0 ? s.blocks[size_t(l - 1)].res3 : slot_input(slot);
        block_backward<A>(ctx, t_.blocks[size_t(l)], s.blocks[size_t(l)], in, dres);
      }
    });
  }

  Tensors t_;
  std::vector<SlotActs> acts_;
  BlockWork work_;
};

}  // namespace

std::unique_ptr<StageModule> make_stage(const ModelConfig& cfg, const ModelShard& shard, const TensorParallel& tp,
                                        int B, int T, const StageBuffers& buffers) {
  Tensors tensors;
  ParamLayout layout = make_layout(cfg, shard, &tensors);
  return std::make_unique<Gpt2Stage>(cfg, std::move(layout), std::move(tensors), shard, tp, B, T, buffers);
}

}  // namespace loom::gpt2
