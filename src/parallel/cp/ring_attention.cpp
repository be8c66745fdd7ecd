// Work space layout (n = B T local rows, kvw = NKV hs, row = C + 2 kvw):
//   qkv32 [n, row], dqkv32 [n, row], out32 [n, C]   fp32 copies (16-bit only; fp32 works in place)
//   kv[2] [n, 2 kvw]                                 blocks: the one attended, the one arriving
//   dkv[2] [n, 2 kvw], part [n, 2 kvw]               backward: travelling gradients, this rank's share
// part exists for cp > 2 only: a rank's share is computed apart from the
// arriving gradient at steps 1 .. cp - 1, and at the last step (cp = 2's only
// one) no block arrives, so the free kv buffer takes the share.
#include "parallel/cp/ring_attention.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>


namespace loom {
namespace {

constexpr int kKvTag = 7301, kGradTag = 7302;

struct Buffers {
  float *qkv32, *dqkv32, *out32, *kv[2], *dkv[2], *part;
};

size_t copy_floats(bool lowp, size_t n, size_t row, size_t C) { return lowp ? n * (2 * row + C) : 0; }

int ring_blocks(int cp) { return cp > 2 ? 5 : 4; }

Buffers carve(float* w, int B, int T, int C, int NH, int NKV, bool lowp, int cp) {
  const QkvLayout L = Backend::qkv_layout(C, NH, NKV);
  const size_t n = size_t(B) * T, row = size_t(L.row), blk = n * 2 * size_t(L.NKV) * L.hs;
  Buffers b{};
  if (lowp) b.qkv32 = w, b.dqkv32 = w + n * row, b.out32 = w + 2 * n * row;
  float* k = w + copy_floats(lowp, n, row, size_t(C));
  b.kv[0] = k, b.kv[1] = k + blk, b.dkv[0] = k + 2 * blk, b.dkv[1] = k + 3 * blk;
  b.part = ring_blocks(cp) > 4 ? k + 4 * blk : nullptr;
  return b;
}

// qkv's key and value columns (side by side in a row) into block[n, 2 kvw], and back.
void pack_kv(float* block, const float* qkv, size_t n, const QkvLayout& L) {
  const size_t w = 2 * size_t(L.NKV) * L.hs;
  for (size_t i = 0; i < n; i++) std::memcpy(block + i * w, qkv + i * L.row + L.kofs, w * sizeof(float));
}
void unpack_kv(float* qkv, const float* block, size_t n, const QkvLayout& L) {
  const size_t w = 2 * size_t(L.NKV) * L.hs;
  for (size_t i = 0; i < n; i++) std::memcpy(qkv + i * L.row + L.kofs, block + i * w, w * sizeof(float));
}

// Calls f(span) for each pair (local query half, key half of the block
// from rank src) with any key at or before a query; doc: the local rows'
// document starts (packed rows) or null.
template <class F>
void for_each_span(const SequenceSplit& mine, int src, int T, const int32_t* doc, F&& f) {
  const SequenceSplit theirs{mine.cp, src};
  const int Tc = T / 2;
  for (int qh = 0; qh < 2; qh++)
    for (int kh = 0; kh < 2; kh++) {
      const int cq = mine.chunk(qh), ck = theirs.chunk(kh);
      if (ck <= cq) f(AttnSpan{qh * Tc, Tc, cq * Tc, kh * Tc, Tc, ck * Tc, doc});
    }
}

// One block's non-blocking send or receive, in pieces (MPI counts are
// ints; pieces between two ranks with one tag arrive in order).
class Transfer {
 public:
  static Transfer send(Communicator& c, const float* buf, size_t n, size_t piece, int peer, int tag) {
    Transfer t;
    for (size_t i = 0; i < n; i += piece)
      t.parts_.push_back(c.send_async(buf + i, std::min(piece, n - i), DType::f32, peer, tag));
    return t;
  }
  static Transfer recv(Communicator& c, float* buf, size_t n, size_t piece, int peer, int tag) {
    Transfer t;
    for (size_t i = 0; i < n; i += piece)
      t.parts_.push_back(c.recv_async(buf + i, std::min(piece, n - i), DType::f32, peer, tag));
    return t;
  }
  // MPI moves a large message only inside MPI calls: a test between spans
  // lets it progress while the attention computes.
  void poke() {
    for (auto& p : parts_) p->test();
  }
  void wait() {
    for (auto& p : parts_) p->wait();
    parts_.clear();
  }

 private:
  std::vector<std::unique_ptr<Work>> parts_;
};

}  // namespace

size_t RingAttention::work_floats(int B, int T, int C, int NH, int NKV, bool lowp, int cp) {
  const QkvLayout L = Backend::qkv_layout(C, NH, NKV);
  const size_t n = size_t(B) * T;
  return copy_floats(lowp, n, size_t(L.row), size_t(C)) + size_t(ring_blocks(cp)) * n * 2 * size_t(L.NKV) * L.hs;
}

template <class A>
void RingAttention::forward(A* out, float* lse, const A* qkv, float* tiles, float* work, int B, int T, int C, int NH,
                            int NKV, const int32_t* doc) {
  constexpr bool f32 = std::is_same_v<A, float>;
  LOOM_CHECK(T % 2 == 0, "ring attention: %d local rows are not two chunks", T);
  const QkvLayout L = Backend::qkv_layout(C, NH, NKV);
  const size_t n = size_t(B) * T, blk = n * 2 * size_t(L.NKV) * L.hs;
  Buffers w = carve(work, B, T, C, NH, NKV, !f32, split_.cp);
  const float* q32;
  float* o32;
  if constexpr (f32) {
    q32 = qkv, o32 = out;
  } else {
    ops_.widen(w.qkv32, qkv, n * L.row);
    q32 = w.qkv32, o32 = w.out32;
  }
  const int P = split_.cp, next = (split_.rank + 1) % P, prev = (split_.rank + P - 1) % P;
  pack_kv(w.kv[0], q32, n, L);
  ops_.attention_span_begin(lse, B, T, NH);
  for (int s = 0; s < P; s++) {
    float* cur = w.kv[s % 2];
    Transfer send, recv;
    if (s + 1 < P) {  // the next block arrives while this one is attended
      send = Transfer::send(cp_, cur, blk, piece_, next, kKvTag);
      recv = Transfer::recv(cp_, w.kv[(s + 1) % 2], blk, piece_, prev, kKvTag);
    }
    const KvRows kv{cur, T, 2 * int64_t(L.NKV) * L.hs, 0, int64_t(L.NKV) * L.hs};
    for_each_span(split_, (split_.rank - s + P) % P, T, doc, [&](const AttnSpan& span) {
      ops_.attention_span_forward(o32, lse, q32, T, kv, span, tiles, B, C, NH, NKV);
      send.poke(), recv.poke();
    });
    recv.wait(), send.wait();
  }
  if constexpr (!f32) ops_.narrow(out, o32, n * C);
}

template <class A>
void RingAttention::backward(A* dqkv, const float* dout, const A* qkv, const A* out, const float* lse, float* tiles,
                             float* work, int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  constexpr bool f32 = std::is_same_v<A, float>;
  const QkvLayout L = Backend::qkv_layout(C, NH, NKV);
  const int64_t kvw = int64_t(L.NKV) * L.hs;
  const size_t n = size_t(B) * T, blk = n * 2 * size_t(kvw);
  Buffers w = carve(work, B, T, C, NH, NKV, !f32, split_.cp);
  const float *q32, *o32;
  float* dq32;
  if constexpr (f32) {
    q32 = qkv, o32 = out, dq32 = dqkv;
  } else {
    ops_.widen(w.qkv32, qkv, n * L.row);
    ops_.widen(w.out32, out, n * C);
    q32 = w.qkv32, o32 = w.out32, dq32 = w.dqkv32;
  }
  std::memset(dq32, 0, n * L.row * sizeof(float));
  const int P = split_.cp, next = (split_.rank + 1) % P, prev = (split_.rank + P - 1) % P;
  pack_kv(w.kv[0], q32, n, L);
  // held: the travelling gradient of the block attended at step s, once
  // this rank's share (computed apart, into `share`) is added.
  Transfer grad_send, grad_recv;
  for (int s = 0; s < P; s++) {
    float* cur = w.kv[s % 2];
    Transfer send, recv;
    if (s + 1 < P) {
      send = Transfer::send(cp_, cur, blk, piece_, next, kKvTag);
      recv = Transfer::recv(cp_, w.kv[(s + 1) % 2], blk, piece_, prev, kKvTag);
    }
    float* held = w.dkv[s % 2];
    // At step 0 nothing has arrived to add to; at the last no block arrives.
    float* share = s == 0 ? held : s + 1 == P ? w.kv[(s + 1) % 2] : w.part;
    std::memset(share, 0, blk * sizeof(float));
    const KvRows kv{cur, T, 2 * kvw, 0, kvw};
    const KvGradRows dkv{share, 2 * kvw, 0, kvw};
    for_each_span(split_, (split_.rank - s + P) % P, T, doc, [&](const AttnSpan& span) {
      ops_.attention_span_backward(dq32, dkv, dout, q32, o32, lse, T, kv, span, tiles, B, C, NH, NKV);
      send.poke(), recv.poke(), grad_send.poke(), grad_recv.poke();
    });
    if (s > 0) {
      grad_recv.wait();  // the block's gradient from the ranks before
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < blk; i++) held[i] += share[i];
    }
    grad_send.wait();  // the other buffer is free for the next arrival
    grad_send = Transfer::send(cp_, held, blk, piece_, next, kGradTag);
    grad_recv = Transfer::recv(cp_, w.dkv[(s + 1) % 2], blk, piece_, prev, kGradTag);
    recv.wait(), send.wait();
  }
  grad_recv.wait(), grad_send.wait();  // after a full turn: this rank's own block's gradient
  unpack_kv(dq32, w.dkv[P % 2], n, L);
  if constexpr (!f32) ops_.narrow(dqkv, dq32, n * L.row);
}

template void RingAttention::forward(float*, float*, const float*, float*, float*, int, int, int, int, int,
                                     const int32_t*);
template void RingAttention::forward(bf16*, float*, const bf16*, float*, float*, int, int, int, int, int,
                                     const int32_t*);
template void RingAttention::forward(f16*, float*, const f16*, float*, float*, int, int, int, int, int,
                                     const int32_t*);
template void RingAttention::backward(float*, const float*, const float*, const float*, const float*, float*, float*,
                                      int, int, int, int, int, const int32_t*);
template void RingAttention::backward(bf16*, const float*, const bf16*, const bf16*, const float*, float*, float*,
                                      int, int, int, int, int, const int32_t*);
template void RingAttention::backward(f16*, const float*, const f16*, const f16*, const float*, float*, float*, int,
                                      int, int, int, int, const int32_t*);

}  // namespace loom
