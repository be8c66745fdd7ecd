#include "kernels/backend.h"

#include <omp.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"

namespace loom {

size_t CpuBackend::attention_thread_floats(bool tiled, bool lowp, int T, int C, int NH, int NKV, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  if (tiled) return cpu::attention_tiled_work_floats(threads);
  return lowp ? cpu::attention_lowp_work_floats(T, C, NH, NKV, threads) : 0;
}

template <class A>
void CpuBackend::attention_forward(bool tiled, A* out, void* saved, const A* qkv, float* work, float* wide, int B,
                                   int T, int C, int NH, int NKV, const int32_t* doc) {
  // Useful work: QK^T and PV over the causal half (doc masks not counted).
  ProfileScope p(profile_, "attention fwd", flops_limit<A>(), 2.0 * B * T * double(T) * C, 0,
                 [&] { return strprintf("attention fwd %s B%d T%d C%d NH%d", type_name<A>(), B, T, C, NH); });
  if (tiled) {
    if constexpr (std::is_same_v<A, float>)
      cpu::attention_tiled_forward(out, static_cast<float*>(saved), qkv, work, B, T, C, NH, NKV, doc);
    else
      cpu::attention_tiled_forward(out, static_cast<float*>(saved), qkv, wide, work, B, T, C, NH, NKV, doc);
  } else if constexpr (std::is_same_v<A, float>) {
    cpu::attention_forward(out, static_cast<float*>(saved), qkv, B, T, C, NH, NKV, doc);
  } else {
    cpu::attention_forward(out, static_cast<A*>(saved), qkv, work, B, T, C, NH, NKV, doc);
  }
}

// The materialized backward needs no doc: the masked probabilities are 0.
template <class A>
void CpuBackend::attention_backward(bool tiled, A* dqkv, float* scratch, const float* dout, const A* qkv, const A* out,
                                    const void* saved, float* work, float* wide, int B, int T, int C, int NH, int NKV,
                                    const int32_t* doc) {
  // dV, dP, dQ, dK over the causal half (a tiled pass's recomputed QK^T not counted).
  ProfileScope p(profile_, "attention bwd", flops_limit<A>(), 4.0 * B * T * double(T) * C, 0,
                 [&] { return strprintf("attention bwd %s B%d T%d C%d NH%d", type_name<A>(), B, T, C, NH); });
  const float* lse = static_cast<const float*>(saved);
  if (tiled) {
    if constexpr (std::is_same_v<A, float>)
      cpu::attention_tiled_backward(dqkv, work, dout, qkv, out, lse, B, T, C, NH, NKV, doc);
    else
      cpu::attention_tiled_backward(dqkv, wide, work, dout, qkv, out, lse, B, T, C, NH, NKV, doc);
  } else if constexpr (std::is_same_v<A, float>) {
    cpu::attention_backward(dqkv, scratch, dout, qkv, static_cast<const float*>(saved), B, T, C, NH, NKV);
  } else {
    cpu::attention_backward(dqkv, scratch, work, dout, qkv, static_cast<const A*>(saved), B, T, C, NH, NKV);
  }
}

#define LOOM_BACKEND_ATTENTION(A)                                                                                   \
  template void CpuBackend::attention_forward(bool, A*, void*, const A*, float*, float*, int, int, int, int, int,   \
                                              const int32_t*);                                                      \
  template void CpuBackend::attention_backward(bool, A*, float*, const float*, const A*, const A*, const void*,     \
                                               float*, float*, int, int, int, int, int, const int32_t*);
LOOM_BACKEND_ATTENTION(float)
LOOM_BACKEND_ATTENTION(bf16)
LOOM_BACKEND_ATTENTION(f16)
#undef LOOM_BACKEND_ATTENTION

}  // namespace loom
