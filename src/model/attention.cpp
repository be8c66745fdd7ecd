#include "model/attention.h"

#include <omp.h>

#include "core/check.h"
#include "parallel/cp/ring_attention.h"

namespace loom {

size_t Attention::work_floats(bool tiled, bool lowp, int cp, int B, int T, int C, int NH, int NKV, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  size_t n = Backend::attention_thread_floats(tiled, lowp, T, C, NH, NKV, threads);
  if (cp > 1) n += RingAttention::work_floats(B, T, C, NH, NKV, lowp, cp);
  else if (tiled && lowp) n += Backend::attention_wide_floats(B, T, C, NH, NKV);
  return n;
}

void Attention::reserve(bool lowp, int B, int T, int C, int NH, int NKV) {
  LOOM_CHECK(tiled_ || !ring_, "context parallelism needs the tiled attention");
  thread_floats_ = Backend::attention_thread_floats(tiled_, lowp, T, C, NH, NKV, omp_get_max_threads());
  work_floats_ = work_floats(tiled_, lowp, ring_ ? ring_->split().cp : 1, B, T, C, NH, NKV, 0);
  work_ = Arena();
  work_.reserve(work_floats_ * sizeof(float));
  work_.allocate(ops_->memory());
}

size_t Attention::saved_bytes(bool tiled, int B, int T, int NH, size_t a) {
  return tiled ? size_t(B) * NH * T * sizeof(float) : size_t(B) * NH * T * T * a;
}

size_t Attention::scratch_floats(bool tiled, int B, int T, int NH) { return tiled ? 0 : size_t(B) * NH * T * T; }

template <class A>
void Attention::forward(A* out, void* saved, const A* qkv, int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  float* const work = work_.at<float>(0);
  float* const rest = work + thread_floats_;
  if (ring_) return ring_->forward(out, static_cast<float*>(saved), qkv, work, rest, B, T, C, NH, NKV, doc);
  ops_->attention_forward(tiled_, out, saved, qkv, work, rest, B, T, C, NH, NKV, doc);
}

template <class A>
void Attention::backward(A* dqkv, float* scratch, const float* dout, const A* qkv, const A* out, const void* saved,
                         int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  float* const work = work_.at<float>(0);
  float* const rest = work + thread_floats_;
  if (ring_) return ring_->backward(dqkv, dout, qkv, out, static_cast<const float*>(saved), work, rest, B, T, C, NH,
                                    NKV, doc);
  ops_->attention_backward(tiled_, dqkv, scratch, dout, qkv, out, saved, work, rest, B, T, C, NH, NKV, doc);
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
