#include "model/gpt2/gpt2_stage.h"

#include "model/block_stage.h"
#include "model/gpt2/gpt2_block.h"

namespace loom::gpt2 {
namespace {

// GPT-2 as BlockStage's family: its blocks, and LayerNorm as the final norm.
struct Gpt2 {
  using Tensors = gpt2::Tensors;
  using BlockActs = gpt2::BlockActs;
  struct NormActs {
    float *mean = nullptr, *rstd = nullptr;
  };
  struct State {  // nothing besides the parameters
    State(Backend&, const ModelConfig&, int) {}
  };

  static TransformerStage::SharedTensors shared(const Tensors& t) { return {t.wte, t.wpe, t.wte}; }
  static void plan_block(ActivationPlan& p, BlockActs& a, const ModelConfig& cfg, const TensorParallel& tp, int B,
                         int T, size_t bytes, bool tiled, int /*ep: no experts*/) {
    gpt2::plan_block(p, a, cfg, tp, B, T, bytes, tiled);
  }
  static void plan_block_work(ActivationPlan& p, BlockWork& w, const ModelConfig& cfg, const TensorParallel& tp,
                              int B, int T, size_t bytes, bool tiled, int /*ep*/) {
    gpt2::plan_block_work(p, w, cfg, tp, B, T, bytes, tiled);
  }
  static void plan_norm(ActivationPlan& p, NormActs& n, size_t R) { p.want(&n.mean, R), p.want(&n.rstd, R); }
  // fp32: GELU's backward runs in place.
  static void finish_work(BlockWork& w, ComputePrecision c) {
    if (c == ComputePrecision::fp32) w.dmlp_in = w.dmlp_out;
  }

  template <class A>
  static void block_forward(const BlockContext& ctx, const State&, const BlockTensors& t, BlockActs& a,
                            const float* in) {
    gpt2::block_forward<A>(ctx, t, a, in);
  }
  template <class A>
  static void block_backward(const BlockContext& ctx, const State&, const BlockTensors& t, BlockActs& a,
                             const float* in, float* dres, bool split) {
    gpt2::block_backward<A>(ctx, t, a, in, dres, split);
  }
  template <class A>
  static void block_backward_weight(const BlockContext& ctx, const State&, const BlockTensors& t, const BlockActs& a) {
    gpt2::block_backward_weight<A>(ctx, t, a);
  }

  template <class A>
  static void norm_forward(CpuBackend& ops, const ModelConfig& cfg, const ParamAccess& p, const Tensors& t,
                           NormActs& n, A* out, const float* res, int R) {
    ops.layernorm_forward(out, n.mean, n.rstd, res, p.param(t.lnf_w), p.param(t.lnf_b), R, cfg.d_model);
  }
  static void norm_backward(CpuBackend& ops, const ModelConfig& cfg, const ParamAccess& p, const Tensors& t,
                            const NormActs& n, float* dres, const float* dnorm, const float* res, int R) {
    ops.layernorm_backward(dres, p.grad(t.lnf_w), p.grad(t.lnf_b), dnorm, res, p.param(t.lnf_w), n.mean, n.rstd, R,
                           cfg.d_model);
  }
  static std::vector<int> norm_tensors(const Tensors& t) { return {t.lnf_w, t.lnf_b}; }
};

}  // namespace

std::unique_ptr<StageModule> make_stage(const ModelConfig& cfg, const ModelShard& shard, const TensorParallel& tp,
                                        int B, int T, const StageBuffers& buffers) {
  Tensors tensors;
  ParamLayout layout = make_layout(cfg, shard, &tensors);
  return std::make_unique<BlockStage<Gpt2>>(cfg, std::move(layout), std::move(tensors), shard, tp, B, T, buffers);
}

}  // namespace loom::gpt2
