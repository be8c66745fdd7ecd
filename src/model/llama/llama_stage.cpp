#include "model/llama/llama_stage.h"

#include "model/block_stage.h"
#include "model/llama/llama_block.h"

namespace loom::llama {
namespace {

// LLaMA as BlockStage's family: its blocks with their rotary tables, and
// RMSNorm as the final norm.
struct Llama {
  using Tensors = llama::Tensors;
  using BlockActs = llama::BlockActs;
  struct NormActs {
    float* rstd = nullptr;
  };
  // Rotary tables cos/sin [positions, hd/2] for positions 0.. of a whole
  // sequence, made once; a token reads its position's row (BlockContext::pos).
  struct State {
    std::vector<float> cos, sin;
    State(Backend& ops, const ModelConfig& cfg, int positions)
        : cos(size_t(positions) * size_t(cfg.head_dim() / 2)), sin(cos.size()) {
      ops.rope_table(cos.data(), sin.data(), positions, cfg.head_dim(), cfg.rope_inverse_frequencies().data());
    }
    RopeTables tables() const { return {cos.data(), sin.data()}; }
  };

  static TransformerStage::SharedTensors shared(const Tensors& t) { return {t.embed, -1, t.head}; }
  static void plan_block(ActivationPlan& p, BlockActs& a, const ModelConfig& cfg, const TensorParallel& tp, int B,
                         int T, size_t bytes, bool tiled, int ep) {
    llama::plan_block(p, a, cfg, tp, B, T, bytes, tiled, ep);
  }
  static void plan_block_work(ActivationPlan& p, BlockWork& w, const ModelConfig& cfg, const TensorParallel& tp,
                              int B, int T, size_t bytes, bool tiled, int ep) {
    llama::plan_block_work(p, w, cfg, tp, B, T, bytes, tiled, ep);
  }
  static void plan_norm(ActivationPlan& p, NormActs& n, size_t R) { p.want(&n.rstd, R); }
  static void finish_work(BlockWork&, ComputePrecision) {}

  template <class A>
  static void block_forward(const BlockContext& ctx, const State& s, const BlockTensors& t, BlockActs& a,
                            const float* in) {
    llama::block_forward<A>(ctx, s.tables(), t, a, in);
  }
  template <class A>
  static void block_backward(const BlockContext& ctx, const State& s, const BlockTensors& t, BlockActs& a,
                             const float* in, float* dres, bool split) {
    llama::block_backward<A>(ctx, s.tables(), t, a, in, dres, split);
  }
  template <class A>
  static void block_backward_weight(const BlockContext& ctx, const State&, const BlockTensors& t, const BlockActs& a) {
    llama::block_backward_weight<A>(ctx, t, a);
  }

  template <class A>
  static void norm_forward(CpuBackend& ops, const ModelConfig& cfg, const ParamAccess& p, const Tensors& t,
                           NormActs& n, A* out, const float* res, int R) {
    ops.rmsnorm_forward(out, n.rstd, res, p.param(t.norm), R, cfg.d_model, float(cfg.norm_eps));
  }
  static void norm_backward(CpuBackend& ops, const ModelConfig& cfg, const ParamAccess& p, const Tensors& t,
                            const NormActs& n, float* dres, const float* dnorm, const float* res, int R) {
    ops.rmsnorm_backward(dres, p.grad(t.norm), dnorm, res, p.param(t.norm), n.rstd, R, cfg.d_model);
  }
  static std::vector<int> norm_tensors(const Tensors& t) { return {t.norm}; }
};

}  // namespace

std::unique_ptr<StageModule> make_stage(const ModelConfig& cfg, const ModelShard& shard, const TensorParallel& tp,
                                        int B, int T, const StageBuffers& buffers) {
  Tensors tensors;
  ParamLayout layout = make_layout(cfg, shard, &tensors);
  return std::make_unique<BlockStage<Llama>>(cfg, std::move(layout), std::move(tensors), shard, tp, B, T, buffers);
}

}  // namespace loom::llama
