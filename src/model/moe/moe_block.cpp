#include "model/moe/moe_block.h"

#include "kernels/cpu/residual.h"

namespace loom::moe {

template <class A>
void mlp_forward(const BlockContext& ctx, int router, int gate_up, int down, const Acts& m, const A* x, float* out,
                 const float* residual) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  forward<A>(ctx.ops.matmul(), out, x, w.param(router), nullptr, w.weight<A>(gate_up), w.weight<A>(down),
             shape_of(ctx.cfg, N, ctx.tp.size()), routing(m), buffers<A>(m));
  ctx.tp.reduce_rows(out, out, N, C);
  cpu::residual_bias_forward(out, out, nullptr, residual, N, C);
}

template <class A>
void mlp_backward(const BlockContext& ctx, int router, int gate_up, int down, const Acts& m, const A* x,
                  const float* dres, float* dnorm) {
  const int N = ctx.N(), C = ctx.cfg.d_model;
  const ParamAccess& w = ctx.p;
  const BlockWork& k = ctx.work;
  const BackwardWork<A> work{k.moe_dxp, k.moe_dhidden, static_cast<A*>(k.moe_dyp), static_cast<A*>(k.moe_dgate_up),
                             k.moe_dlogits};
  backward<A>(ctx.ops.matmul(), dnorm, w.grad(router), w.grad(gate_up), w.grad(down), dres, x, w.param(router),
              w.weight<A>(gate_up), w.weight<A>(down), shape_of(ctx.cfg, N, ctx.tp.size()), routing(m),
              buffers<A>(m), work);
  ctx.grad_ready(router), ctx.grad_ready(gate_up), ctx.grad_ready(down);
  ctx.tp.reduce_rows(dnorm, dnorm, N, C);
}

#define LOOM_MOE_BLOCK(A)                                                                                     \
  template void mlp_forward<A>(const BlockContext&, int, int, int, const Acts&, const A*, float*, const float*); \
  template void mlp_backward<A>(const BlockContext&, int, int, int, const Acts&, const A*, const float*, float*);
LOOM_MOE_BLOCK(float)
LOOM_MOE_BLOCK(bf16)
LOOM_MOE_BLOCK(f16)
#undef LOOM_MOE_BLOCK

}  // namespace loom::moe
