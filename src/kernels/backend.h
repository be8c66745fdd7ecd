// The one way kernels and memory are reached outside src/kernels/: one
// backend object per process (per run), created by the run and passed
// explicitly to the model stages, the optimizers, the gradient reducers and
// the ZeRO gathers. `Backend` is CpuBackend today (kernels/cpu/); a CUDA
// backend would give the same member names (docs/backends.md lists them).
//
// A compile-time seam, not a virtual interface: the ops are templates over
// the storage type A (float, bf16 or f16: the compute type of weights and
// stored activations), which cannot be virtual; a process runs one kind of
// device; and a virtual call per op would be paid on every small kernel for
// nothing. Memory is the exception: allocation is rare, so memory() is a
// MemoryResource (core/memory_resource.h) behind a virtual interface.
//
// Norm statistics, softmax, losses and gradients of fp32 tensors stay fp32
// whatever A is. Members that forward their arguments as given keep the
// kernel's own argument list (kernels/cpu/<op>.h documents it).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/check.h"
#include "kernels/backend_fwd.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul_lowp.h"
#include "kernels/cpu/non_finite.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax_xent.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/kernel_profile.h"

namespace loom {

// What the kernels run on and which implementation each op kind chose.
using DeviceInfo = cpu::Dispatch;
// The descriptors the span kernels of ring attention take (device-neutral
// plain structs: row ranges and strides).
using AttnSpan = cpu::AttnSpan;
using KvRows = cpu::KvRows;
using KvGradRows = cpu::KvGradRows;
using QkvLayout = cpu::detail::QkvLayout;
using AdamWStep = cpu::AdamWStep;

// Profile row names: "kind NxC" and "kind type n".
struct RowsName {
  const char* kind;
  long long N, C;
  std::string operator()() const { return strprintf("%s %lldx%lld", kind, N, C); }
};
struct ElemsName {
  const char* kind;
  const char* type;
  size_t n;
  std::string operator()() const { return strprintf("%s %s %zu", kind, type, n); }
};

class CpuBackend {
 public:
  CpuBackend() = default;
  CpuBackend(const CpuBackend&) = delete;  // one per process: passed by reference
  CpuBackend& operator=(const CpuBackend&) = delete;

  DeviceInfo describe() const { return cpu::describe_dispatch(); }
  // Parameters, gradients, optimizer state and activations come from here.
  MemoryResource& memory() { return memory_; }
  // Times every op into `profile` from now on (null: off).
  void set_profile(KernelProfile* profile) { profile_ = profile; }

  // Matrix products of the linear layers (parallel/tp/ drives them):
  // out[N,OC] = inp[N,C] weight[OC,C]^T + bias, in fp32 or A with fp32
  // accumulation; backward accumulates dweight/dbias, overwrites dinp.
  template <class O, class A>
  void matmul_forward(O* out, const A* inp, const A* weight, const float* bias, int N, int C, int OC) {
    ProfileScope p(profile_, "matmul fwd", flops_limit<A>(), 2.0 * N * C * OC,
                   double(sizeof(A)) * (double(N) * C + double(OC) * C) + double(sizeof(O)) * N * OC,
                   [&] { return strprintf("matmul fwd %s %dx%d -> %d", type_name<A>(), N, C, OC); });
    cpu::matmul_forward(matmul_, out, inp, weight, bias, N, C, OC);
  }
  template <class A>
  void matmul_backward(float* dinp, float* dweight, float* dbias, const A* dout, const A* inp, const A* weight, int N,
                       int C, int OC) {
    ProfileScope p(profile_, "matmul bwd", flops_limit<A>(),
                   2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)),
                   double(sizeof(A)) * (double(N) * OC + double(N) * C + double(OC) * C) + 4.0 * N * C +
                       8.0 * OC * C,
                   [&] { return strprintf("matmul bwd %s %dx%d -> %d", type_name<A>(), N, C, OC); });
    cpu::matmul_backward(matmul_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  // C[M,N] (+)= op(A)[M,K] op(B)[K,N], row-major (ta: A stored [K,M]; tb: B
  // stored [N,K]); fp32 operands on the fp32 engine, 16-bit ones summed in
  // fp32. A 16-bit C is rounded once and never accumulated into.
  template <class C, class A>
  void gemm(C* c, const A* a, const A* b, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool accumulate = false) {
    ProfileScope p(profile_, "gemm", flops_limit<A>(), 2.0 * M * N * K,
                   double(sizeof(A)) * (double(M) * K + double(K) * N) + double(sizeof(C)) * M * N,
                   [&] { return strprintf("gemm %s %lldx%lldx%lld", type_name<A>(), (long long)M, (long long)N,
                                          (long long)K); });
    if constexpr (std::is_same_v<A, float>) matmul_.fp32().gemm(c, a, b, nullptr, M, N, K, ta, tb, accumulate);
    else if constexpr (std::is_same_v<C, float>) matmul_.gemm(c, a, b, nullptr, M, N, K, ta, tb, accumulate);
    else matmul_.gemm(c, a, b, nullptr, M, N, K, ta, tb);
  }
  // The engine itself, for kernels/ and benchmarks that time it.
  cpu::LowpMatmulEngine& matmul() { return matmul_; }

  // Norms: out in A (fp32 statistics); backward accumulates into fp32 dinp.
  template <class A>
  void layernorm_forward(A* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N,
                         int C) {
    ProfileScope p(profile_, "layernorm fwd", OpLimit::memory, 0, (4.0 + sizeof(A)) * N * C, RowsName{"layernorm fwd", N, C});
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, 1, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) {
    ProfileScope p(profile_, "layernorm bwd", OpLimit::memory, 0, 16.0 * N * C, RowsName{"layernorm bwd", N, C});
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, 1, N, C);
  }
  template <class A>
  void rmsnorm_forward(A* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
    ProfileScope p(profile_, "rmsnorm fwd", OpLimit::memory, 0, (4.0 + sizeof(A)) * N * C, RowsName{"rmsnorm fwd", N, C});
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int N, int C) {
    ProfileScope p(profile_, "rmsnorm bwd", OpLimit::memory, 0, 16.0 * N * C, RowsName{"rmsnorm bwd", N, C});
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }

  // Activations. gelu's backward overwrites din (in A; fp32 may alias dout).
  template <class A>
  void gelu_forward(A* out, const A* in, size_t n) {
    ProfileScope p(profile_, "gelu fwd", OpLimit::memory, 0, 2.0 * sizeof(A) * n, ElemsName{"gelu fwd", type_name<A>(), n});
    cpu::gelu_forward(out, in, n);
  }
  template <class A>
  void gelu_backward(A* din, const A* in, const float* dout, size_t n) {
    ProfileScope p(profile_, "gelu bwd", OpLimit::memory, 0, (2.0 * sizeof(A) + 4) * n, ElemsName{"gelu bwd", type_name<A>(), n});
    cpu::gelu_backward(din, in, dout, n);
  }
  template <class A>
  void swiglu_forward(A* out, const A* gate_up, int N, int F) {
    ProfileScope p(profile_, "swiglu fwd", OpLimit::memory, 0, 3.0 * sizeof(A) * N * F, RowsName{"swiglu fwd", N, F});
    cpu::swiglu_forward(out, gate_up, N, F);
  }
  template <class A>
  void swiglu_backward(A* dgate_up, const A* gate_up, const float* dout, int N, int F) {
    ProfileScope p(profile_, "swiglu bwd", OpLimit::memory, 0, (4.0 * sizeof(A) + 4) * N * F,
                   RowsName{"swiglu bwd", N, F});
    cpu::swiglu_backward(dgate_up, gate_up, dout, N, F);
  }
  // out[N,C] = a + bias + res (bias or res may be null; out may alias a).
  void residual_bias_forward(float* out, const float* a, const float* bias, const float* res, int64_t N, int C) {
    ProfileScope p(profile_, "residual", OpLimit::memory, 0, (res ? 12.0 : 8.0) * N * C, RowsName{"residual", int(N), C});
    cpu::residual_bias_forward(out, a, bias, res, N, C);
  }

  // Rotary positions: the cos/sin tables, and in place on the q and k heads
  // of qkv (pos[N]: each row's table row, or null: n % T).
  template <class... Args>
  void rope_table(Args&&... args) { cpu::rope_table(std::forward<Args>(args)...); }
  template <class A>
  void rope_forward(A* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                    const int32_t* pos = nullptr) {
    ProfileScope p(profile_, "rope fwd", OpLimit::memory, 0, 2.0 * sizeof(A) * N * (NH + NKV) * hd,
                   RowsName{"rope fwd", N, (NH + NKV) * hd});
    cpu::rope_forward(qkv, cos, sin, N, T, NH, NKV, hd, pos);
  }
  template <class A>
  void rope_backward(A* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                     const int32_t* pos = nullptr) {
    ProfileScope p(profile_, "rope bwd", OpLimit::memory, 0, 2.0 * sizeof(A) * N * (NH + NKV) * hd,
                   RowsName{"rope bwd", N, (NH + NKV) * hd});
    cpu::rope_backward(dqkv, cos, sin, N, T, NH, NKV, hd, pos);
  }

  // Casts. round_to: fp32 -> A (a copy in fp32; rounded in 16 bits; not in
  // place); narrow / widen: fp32 <-> a 16-bit type.
  template <class A>
  void round_to(A* out, const float* in, size_t n) {
    ProfileScope p(profile_, "cast", OpLimit::memory, 0, (4.0 + sizeof(A)) * n, ElemsName{"cast to", type_name<A>(), n});
    if constexpr (std::is_same_v<A, float>) {
      if (out != in) std::copy(in, in + n, out);
    } else {
      cpu::narrow(out, in, n);
    }
  }
  template <class H>
  void narrow(H* out, const float* in, size_t n) {
    ProfileScope p(profile_, "cast", OpLimit::memory, 0, (4.0 + sizeof(H)) * n, ElemsName{"cast to", type_name<H>(), n});
    cpu::narrow(out, in, n);
  }
  template <class H>
  void widen(float* out, const H* in, size_t n) {
    ProfileScope p(profile_, "cast", OpLimit::memory, 0, (4.0 + sizeof(H)) * n, ElemsName{"cast from", type_name<H>(), n});
    cpu::widen(out, in, n);
  }

  // Embeddings (whole vocabulary, or a tp rank's rows of it) and positions.
  template <class... Args>
  void encoder_forward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("encoder forward"); });
    cpu::encoder_forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  void encoder_backward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("encoder backward"); });
    cpu::encoder_backward(std::forward<Args>(args)...);
  }
  template <class... Args>
  void token_embedding_forward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("token embedding forward"); });
    cpu::token_embedding_forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  void token_embedding_backward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("token embedding backward"); });
    cpu::token_embedding_backward(std::forward<Args>(args)...);
  }
  template <class... Args>
  void position_embedding_forward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("position embedding forward"); });
    cpu::position_embedding_forward(std::forward<Args>(args)...);
  }
  template <class... Args>
  void position_embedding_backward(Args&&... args) {
    ProfileScope p(profile_, "embedding", OpLimit::memory, 0, 0, [] { return std::string("position embedding backward"); });
    cpu::position_embedding_backward(std::forward<Args>(args)...);
  }

  // Cross-entropy: whole rows (fused: the logits' gradient in place), or a
  // vocabulary-parallel rank's partial max and sums and the finish.
  template <class... Args>
  void softmax_xent_forward(Args&&... args) {
    ProfileScope p(profile_, "cross-entropy", OpLimit::memory, 0, 0, [] { return std::string("softmax xent forward"); });
    cpu::softmax_xent_forward(std::forward<Args>(args)...);
  }
  template <class L>
  void softmax_xent_fused(float* losses, L* logits, const int32_t* targets, float dloss, int N, int V) {
    ProfileScope p(profile_, "cross-entropy", OpLimit::memory, 0, 2.0 * sizeof(L) * N * V,
                   [&] { return strprintf("softmax xent fused %s %dx%d", type_name<L>(), N, V); });
    cpu::softmax_xent_fused(losses, logits, targets, dloss, N, V);
  }
  template <class... Args>
  void xent_partial_max(Args&&... args) {
    ProfileScope p(profile_, "cross-entropy", OpLimit::memory, 0, 0, [] { return std::string("xent partial max"); });
    cpu::xent_partial_max(std::forward<Args>(args)...);
  }
  template <class... Args>
  void xent_partial_sums(Args&&... args) {
    ProfileScope p(profile_, "cross-entropy", OpLimit::memory, 0, 0, [] { return std::string("xent partial sums"); });
    cpu::xent_partial_sums(std::forward<Args>(args)...);
  }
  template <class... Args>
  void xent_finish(Args&&... args) {
    ProfileScope p(profile_, "cross-entropy", OpLimit::memory, 0, 0, [] { return std::string("xent finish"); });
    cpu::xent_finish(std::forward<Args>(args)...);
  }

  // Attention over whole sequences (kernels/cpu/attention*.h):
  // materialized (keeps the probabilities) or tiled (keeps one log-sum-exp
  // per query row). work: attention_thread_floats, then (16-bit tiled)
  // attention_wide_floats after it.
  // (Sizes are static: the planner asks them without a backend.)
  static size_t attention_thread_floats(bool tiled, bool lowp, int T, int C, int NH, int NKV, int threads);
  static size_t attention_wide_floats(int B, int T, int C, int NH, int NKV) {
    return cpu::attention_tiled_wide_floats(B, T, C, NH, NKV);
  }
  template <class A>
  void attention_forward(bool tiled, A* out, void* saved, const A* qkv, float* work, float* wide, int B, int T, int C,
                         int NH, int NKV, const int32_t* doc);
  template <class A>
  void attention_backward(bool tiled, A* dqkv, float* scratch, const float* dout, const A* qkv, const A* out,
                          const void* saved, float* work, float* wide, int B, int T, int C, int NH, int NKV,
                          const int32_t* doc);
  // The span kernels ring attention (parallel/cp/) runs block by block, in
  // fp32: start the row log-sum-exps, then one (query, key) span at a time.
  static QkvLayout qkv_layout(int C, int NH, int NKV) { return cpu::detail::qkv_layout(C, NH, NKV); }
  void attention_span_begin(float* lse, int B, int T, int NH) { cpu::attention_tiled_begin(lse, B, T, NH); }
  template <class... Args>
  void attention_span_forward(Args&&... args) {
    ProfileScope p(profile_, "attention span", OpLimit::fp32_flops, 0, 0, [] { return std::string("attention span forward"); });
    cpu::attention_tiled_forward_span(std::forward<Args>(args)...); }
  template <class... Args>
  void attention_span_backward(Args&&... args) {
    ProfileScope p(profile_, "attention span", OpLimit::fp32_flops, 0, 0, [] { return std::string("attention span backward"); });
    cpu::attention_tiled_backward_span(std::forward<Args>(args)...); }

  // The optimizer: AdamW over a range (and the 16-bit copy it refreshes),
  // the squares the global norm sums, and mixed precision's found-inf check.
  void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                    float weight_decay, const AdamWStep& step) {
    ProfileScope p(profile_, "adamw", OpLimit::memory, 0, 28.0 * n, [] { return std::string("adamw fp32"); });
    cpu::adamw_update(param, m, v, grad, n, grad_scale, weight_decay, step);
  }
  template <class H>
  void adamw_update(float* param, H* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                    float weight_decay, const AdamWStep& step) {
    ProfileScope p(profile_, "adamw", OpLimit::memory, 0, (28.0 + sizeof(H)) * n,
                   [] { return strprintf("adamw + %s copy", type_name<H>()); });
    cpu::adamw_update(param, copy, m, v, grad, n, grad_scale, weight_decay, step);
  }
  double sum_of_squares(const float* x, size_t n) {
    ProfileScope p(profile_, "clipping", OpLimit::memory, 0, 4.0 * n, [] { return std::string("sum of squares"); });
    return cpu::sum_of_squares(x, n);
  }
  bool unscale_and_check(float* x, size_t n, float inv_scale) {
    ProfileScope p(profile_, "found-inf", OpLimit::memory, 0, 8.0 * n, [] { return std::string("unscale and check"); });
    return cpu::unscale_and_check(x, n, inv_scale);
  }
  bool has_non_finite(const float* x, size_t n) {
    ProfileScope p(profile_, "found-inf", OpLimit::memory, 0, 4.0 * n, [] { return std::string("non-finite check"); });
    return cpu::has_non_finite(x, n);
  }

 private:
  template <class A>
  static OpLimit flops_limit() { return std::is_same_v<A, float> ? OpLimit::fp32_flops : OpLimit::lowp_flops; }

  cpu::LowpMatmulEngine matmul_;
  cpu::HostMemory memory_;
  KernelProfile* profile_ = nullptr;
};

}  // namespace loom
