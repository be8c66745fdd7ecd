#include "model/attention.h"

#include <omp.h>

#include <type_traits>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/attention_tiled.h"
#include "parallel/cp/ring_attention.h"

namespace loom {
namespace {

size_t thread_floats(bool tiled, bool lowp, int T, int C, int NH, int NKV, int threads) {
  if (tiled) return cpu::attention_tiled_work_floats(threads);
  return lowp ? cpu::attention_lowp_work_floats(T, C, NH, NKV, threads) : 0;
}

}  // namespace

size_t Attention::work_floats(bool tiled, bool lowp, int cp, int B, int T, int C, int NH, int NKV, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  size_t n = thread_floats(tiled, lowp, T, C, NH, NKV, threads);
  if (cp > 1) n += RingAttention::work_floats(B, T, C, NH, NKV, lowp, cp);
  else if (tiled && lowp) n += cpu::attention_tiled_wide_floats(B, T, C, NH, NKV);
  return n;
}

void Attention::reserve(bool lowp, int B, int T, int C, int NH, int NKV) {
  LOOM_CHECK(tiled_ || !ring_, "context parallelism needs the tiled attention");
  thread_floats_ = thread_floats(tiled_, lowp, T, C, NH, NKV, omp_get_max_threads());
  work_.assign(work_floats(tiled_, lowp, ring_ ? ring_->split().cp : 1, B, T, C, NH, NKV, 0), 0.f);
}

size_t Attention::saved_bytes(bool tiled, int B, int T, int NH, size_t a) {
  return tiled ? size_t(B) * NH * T * sizeof(float) : size_t(B) * NH * T * T * a;
}

size_t Attention::scratch_floats(bool tiled, int B, int T, int NH) { return tiled ? 0 : size_t(B) * NH * T * T; }

template <class A>
void Attention::forward(A* out, void* saved, const A* qkv, int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  float* const work = work_.data();
  float* const rest = work + thread_floats_;
  if (ring_) return ring_->forward(out, static_cast<float*>(saved), qkv, work, rest, B, T, C, NH, NKV, doc);
  if (tiled_) {
    if constexpr (std::is_same_v<A, float>)
      cpu::attention_tiled_forward(out, static_cast<float*>(saved), qkv, work, B, T, C, NH, NKV, doc);
    else
      cpu::attention_tiled_forward(out, static_cast<float*>(saved), qkv, rest, work, B, T, C, NH, NKV, doc);
  } else if constexpr (std::is_same_v<A, float>) {
    cpu::attention_forward(out, static_cast<float*>(saved), qkv, B, T, C, NH, NKV, doc);
  } else {
    cpu::attention_forward(out, static_cast<A*>(saved), qkv, work, B, T, C, NH, NKV, doc);
  }
}

// The materialized backward needs no doc: the masked probabilities are 0.
template <class A>
void Attention::backward(A* dqkv, float* scratch, const float* dout, const A* qkv, const A* out, const void* saved,
                         int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  float* const work = work_.data();
  float* const rest = work + thread_floats_;
  const float* lse = static_cast<const float*>(saved);
  if (ring_) return ring_->backward(dqkv, dout, qkv, out, lse, work, rest, B, T, C, NH, NKV, doc);
  if (tiled_) {
    if constexpr (std::is_same_v<A, float>)
      cpu::attention_tiled_backward(dqkv, work, dout, qkv, out, lse, B, T, C, NH, NKV, doc);
    else
      cpu::attention_tiled_backward(dqkv, rest, work, dout, qkv, out, lse, B, T, C, NH, NKV, doc);
  } else if constexpr (std::is_same_v<A, float>) {
    cpu::attention_backward(dqkv, scratch, dout, qkv, static_cast<const float*>(saved), B, T, C, NH, NKV);
  } else {
    cpu::attention_backward(dqkv, scratch, work, dout, qkv, static_cast<const A*>(saved), B, T, C, NH, NKV);
  }
}

#define LOOM_ATTENTION_TYPES(A)                                                                                 \
  template void Attention::forward(A*, void*, const A*, int, int, int, int, int, const int32_t*);               \
  template void Attention::backward(A*, float*, const float*, const A*, const A*, const void*, int, int, int, int, \
                                    int, const int32_t*);
LOOM_ATTENTION_TYPES(float)
LOOM_ATTENTION_TYPES(bf16)
LOOM_ATTENTION_TYPES(f16)
#undef LOOM_ATTENTION_TYPES

}  // namespace loom
