// Tiles of kQ query rows against tiles of kK key rows; every product goes
// through oneDNN's sgemm on the q/k/v slices in place (rows strided). Threads
// split the (b, h) pairs in forward and the (b, kv head) pairs in backward
// (a kv head's gradient summed over its query heads in order, without
// races), each pair on one thread, so results do not depend on scheduling.
//
// A row's forward state between spans is (o, lse): its normalized output and
// log-sum-exp so far. The online softmax's (max m, sum l, accumulator acc)
// restarts from it as m = lse, l = 1, acc = o, which gives back the same o
// and lse if no key is added.
#include "kernels/cpu/attention_tiled.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/cast.h"

namespace loom::cpu {
namespace {

constexpr int kQ = 64, kK = 64;
constexpr size_t kWorkPerThread = size_t(3) * kQ * kK + size_t(4) * kQ;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using detail::sgemm;

// One query head's span: q[nq, hs] (stride ldq) at positions q_pos.., o
// (stride ldo) and l[nq] its state; k, v [nk, hs] (stride ldkv) at k_pos...
// qdoc (packed rows, or null): per query row, the position its document
// starts at; keys before it are masked too, and key tiles wholly before
// the query tile's first document are skipped.
void forward_head(float* o, int64_t ldo, float* l, const float* q, int64_t ldq, int nq, int q_pos, const int32_t* qdoc,
                  const float* k, const float* v, int64_t ldkv, int nk, int k_pos, int hs, float scale, float* w) {
  float* s = w;                      // [kQ, kK] scores, then probabilities
  float* row_max = w + kQ * kK * 3;  // [kQ]
  float* row_sum = row_max + kQ;     // [kQ]
  for (int i0 = 0; i0 < nq; i0 += kQ) {
    const int i1 = std::min(nq, i0 + kQ), m = i1 - i0;
    const int kend = std::min(nk, q_pos + i1 - k_pos);  // keys after the tile's last query are masked
    const int kbegin = qdoc ? std::max(0, qdoc[i0] - k_pos) : 0;  // keys before its first document too
    if (kend <= kbegin) continue;
    for (int r = 0; r < m; r++) {
      float* orow = o + int64_t(i0 + r) * ldo;
      if (l[i0 + r] == kNegInf) {
        row_max[r] = kNegInf, row_sum[r] = 0.f;
        std::memset(orow, 0, size_t(hs) * sizeof(float));
      } else {
        row_max[r] = l[i0 + r], row_sum[r] = 1.f;
      }
    }
    for (int j0 = kbegin; j0 < kend; j0 += kK) {
      const int j1 = std::min(kend, j0 + kK), n = j1 - j0;
      // S[m, n] = scale Q[i0:i1] K[j0:j1]^T
      sgemm('N', 'T', m, n, hs, scale, q + i0 * ldq, ldq, k + j0 * ldkv, ldkv, 0.f, s, kK);
      for (int r = 0; r < m; r++) {
        float* sr = s + r * kK;
        // Columns [lo, valid): key pos <= query pos, and in the query's document.
        const int valid = std::clamp(q_pos + i0 + r + 1 - (k_pos + j0), 0, n);
        const int lo = qdoc ? std::clamp(qdoc[i0 + r] - (k_pos + j0), 0, n) : 0;
        float mx = row_max[r];
        for (int c = lo; c < valid; c++) mx = std::max(mx, sr[c]);
        // Rescale what this row has summed so far to the new maximum.
        const float correction = row_max[r] == kNegInf ? 0.f : std::exp(row_max[r] - mx);
        float sum = 0.f;
        for (int c = 0; c < n; c++) {
          sr[c] = c >= lo && c < valid ? std::exp(sr[c] - mx) : 0.f;
          sum += sr[c];
        }
        row_sum[r] = row_sum[r] * correction + sum;
        row_max[r] = mx;
        float* orow = o + int64_t(i0 + r) * ldo;
        for (int d = 0; d < hs; d++) orow[d] *= correction;
      }
      // O[i0:i1] += P V[j0:j1]
      sgemm('N', 'N', m, hs, n, 1.f, s, kK, v + j0 * ldkv, ldkv, 1.f, o + int64_t(i0) * ldo, ldo);
    }
    for (int r = 0; r < m; r++) {
      if (row_sum[r] == 0.f) continue;  // nothing seen yet
      float* orow = o + int64_t(i0 + r) * ldo;
      const float inv = 1.f / row_sum[r];
      for (int d = 0; d < hs; d++) orow[d] *= inv;
      l[i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

// One query head's span backward: adds to dq (stride ldq, as q) and dk, dv
// (stride lddkv); o, dO (stride ldo) and l are the finished forward's.
void backward_head(float* dq, float* dk, float* dv, int64_t lddkv, const float* q, int64_t ldq, int nq, int q_pos,
                   const int32_t* qdoc, const float* k, const float* v, int64_t ldkv, int nk, int k_pos,
                   const float* o, const float* dO, int64_t ldo, const float* l, int hs, float scale, float* w) {
  float* p = w;                   // [kQ, kK] probabilities
  float* dp = w + kQ * kK;        // [kQ, kK] their gradient, then the scores'
  float* dsum = w + kQ * kK * 3;  // [kQ]: rowsum(dO o O)
  for (int i0 = 0; i0 < nq; i0 += kQ) {
    const int i1 = std::min(nq, i0 + kQ), m = i1 - i0;
    const int kend = std::min(nk, q_pos + i1 - k_pos);
    const int kbegin = qdoc ? std::max(0, qdoc[i0] - k_pos) : 0;
    if (kend <= kbegin) continue;
    for (int r = 0; r < m; r++) {
      double d = 0;
      for (int c = 0; c < hs; c++) d += double(dO[int64_t(i0 + r) * ldo + c]) * o[int64_t(i0 + r) * ldo + c];
      dsum[r] = float(d);
    }
    for (int j0 = kbegin; j0 < kend; j0 += kK) {
      const int j1 = std::min(kend, j0 + kK), n = j1 - j0;
      // P = exp(scale Q K^T - lse), causal (and within the document)
      sgemm('N', 'T', m, n, hs, scale, q + i0 * ldq, ldq, k + j0 * ldkv, ldkv, 0.f, p, kK);
      for (int r = 0; r < m; r++) {
        const int valid = std::clamp(q_pos + i0 + r + 1 - (k_pos + j0), 0, n);
        const int lo = qdoc ? std::clamp(qdoc[i0 + r] - (k_pos + j0), 0, n) : 0;
        for (int c = 0; c < n; c++)
          p[r * kK + c] = c >= lo && c < valid ? std::exp(p[r * kK + c] - l[i0 + r]) : 0.f;
      }
      // dV[j0:j1] += P^T dO[i0:i1]; dP = dO V^T
      sgemm('T', 'N', n, hs, m, 1.f, p, kK, dO + int64_t(i0) * ldo, ldo, 1.f, dv + j0 * lddkv, lddkv);
      sgemm('N', 'T', m, n, hs, 1.f, dO + int64_t(i0) * ldo, ldo, v + j0 * ldkv, ldkv, 0.f, dp, kK);
      // dS = P o (dP - rowsum(dO o O))
      for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) dp[r * kK + c] = p[r * kK + c] * (dp[r * kK + c] - dsum[r]);
      // dQ[i0:i1] += scale dS K; dK[j0:j1] += scale dS^T Q
      sgemm('N', 'N', m, hs, n, scale, dp, kK, k + j0 * ldkv, ldkv, 1.f, dq + i0 * ldq, ldq);
      sgemm('T', 'N', n, hs, m, scale, dp, kK, q + i0 * ldq, ldq, 1.f, dk + j0 * lddkv, lddkv);
    }
  }
}

KvRows own_kv(const float* qkv, int T, const detail::QkvLayout& L) { return KvRows{qkv, T, L.row, L.kofs, L.vofs}; }

}  // namespace

size_t attention_tiled_work_floats(int threads) { return size_t(std::max(threads, 1)) * kWorkPerThread; }

void attention_tiled_begin(float* lse, int B, int Tq, int NH) {
  std::fill(lse, lse + size_t(B) * NH * Tq, kNegInf);
}

void attention_tiled_forward_span(float* out, float* lse, const float* qkv, int Tq, const KvRows& kv,
                                  const AttnSpan& s, float* work, int B, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const float scale = 1.0f / std::sqrt(float(L.hs));
  LOOM_CHECK(s.q0 >= 0 && s.q0 + s.nq <= Tq && s.k0 >= 0 && s.k0 + s.nk <= kv.T, "attention span out of range");
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH, g = h / L.group;
    const float* q = qkv + (int64_t(b) * Tq + s.q0) * L.row + L.q(h);
    const float* kvrow = kv.base + (int64_t(b) * kv.T + s.k0) * kv.ld;
    float* o = out + (int64_t(b) * Tq + s.q0) * C + h * L.hs;
    const int32_t* qdoc = s.doc ? s.doc + int64_t(b) * Tq + s.q0 : nullptr;
    forward_head(o, C, lse + int64_t(bh) * Tq + s.q0, q, L.row, s.nq, s.q_pos, qdoc, kvrow + kv.kofs + g * L.hs,
                 kvrow + kv.vofs + g * L.hs, kv.ld, s.nk, s.k_pos, L.hs, scale,
                 work + size_t(omp_get_thread_num()) * kWorkPerThread);
  }
}

void attention_tiled_backward_span(float* dqkv, const KvGradRows& dkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse, int Tq, const KvRows& kv, const AttnSpan& s,
                                   float* work, int B, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const float scale = 1.0f / std::sqrt(float(L.hs));
  LOOM_CHECK(s.q0 >= 0 && s.q0 + s.nq <= Tq && s.k0 >= 0 && s.k0 + s.nk <= kv.T, "attention span out of range");
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * L.NKV; bg++) {
    const int b = bg / L.NKV, g = bg % L.NKV;
    const int64_t kv_row = (int64_t(b) * kv.T + s.k0);
    const float* k = kv.base + kv_row * kv.ld + kv.kofs + g * L.hs;
    const float* v = kv.base + kv_row * kv.ld + kv.vofs + g * L.hs;
    float* dk = dkv.base + kv_row * dkv.ld + dkv.kofs + g * L.hs;
    float* dv = dkv.base + kv_row * dkv.ld + dkv.vofs + g * L.hs;
    float* w = work + size_t(omp_get_thread_num()) * kWorkPerThread;
    const int64_t q_row = int64_t(b) * Tq + s.q0;
    const int32_t* qdoc = s.doc ? s.doc + q_row : nullptr;
    for (int h = g * L.group; h < (g + 1) * L.group; h++) {
      backward_head(dqkv + q_row * L.row + L.q(h), dk, dv, dkv.ld, qkv + q_row * L.row + L.q(h), L.row, s.nq,
                    s.q_pos, qdoc, k, v, kv.ld, s.nk, s.k_pos, out + q_row * C + h * L.hs,
                    dout + q_row * C + h * L.hs, C, lse + (int64_t(b) * NH + h) * Tq + s.q0, L.hs, scale, w);
    }
  }
}

void attention_tiled_forward(float* out, float* lse, const float* qkv, float* work, int B, int T, int C, int NH,
                             int NKV, const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  attention_tiled_begin(lse, B, T, NH);
  attention_tiled_forward_span(out, lse, qkv, T, own_kv(qkv, T, L), AttnSpan{0, T, 0, 0, T, 0, doc}, work, B, C, NH,
                               NKV);
}

void attention_tiled_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  std::memset(dqkv, 0, size_t(B) * T * L.row * sizeof(float));
  attention_tiled_backward_span(dqkv, KvGradRows{dqkv, L.row, L.kofs, L.vofs}, dout, qkv, out, lse, T,
                                own_kv(qkv, T, L), AttnSpan{0, T, 0, 0, T, 0, doc}, work, B, C, NH, NKV);
}

size_t attention_tiled_wide_floats(int B, int T, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  return size_t(B) * T * (2 * L.row + C);  // qkv and dqkv, out
}

template <class H>
void attention_tiled_forward(H* out, float* lse, const H* qkv, float* wide, float* work, int B, int T, int C, int NH,
                             int NKV, const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const size_t n_qkv = size_t(B) * T * L.row, n_out = size_t(B) * T * C;
  float *qkv32 = wide, *out32 = wide + 2 * n_qkv;
  widen(qkv32, qkv, n_qkv);
  attention_tiled_forward(out32, lse, qkv32, work, B, T, C, NH, NKV, doc);
  narrow(out, out32, n_out);
}

template <class H>
void attention_tiled_backward(H* dqkv, float* wide, float* work, const float* dout, const H* qkv, const H* out,
                              const float* lse, int B, int T, int C, int NH, int NKV, const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const size_t n_qkv = size_t(B) * T * L.row, n_out = size_t(B) * T * C;
  float *qkv32 = wide, *dqkv32 = wide + n_qkv, *out32 = wide + 2 * n_qkv;
  widen(qkv32, qkv, n_qkv);
  widen(out32, out, n_out);
  attention_tiled_backward(dqkv32, work, dout, qkv32, out32, lse, B, T, C, NH, NKV, doc);
  narrow(dqkv, dqkv32, n_qkv);
}

template void attention_tiled_forward(bf16*, float*, const bf16*, float*, float*, int, int, int, int, int,
                                      const int32_t*);
template void attention_tiled_forward(f16*, float*, const f16*, float*, float*, int, int, int, int, int,
                                      const int32_t*);
template void attention_tiled_backward(bf16*, float*, float*, const float*, const bf16*, const bf16*, const float*,
                                       int, int, int, int, int, const int32_t*);
template void attention_tiled_backward(f16*, float*, float*, const float*, const f16*, const f16*, const float*, int,
                                       int, int, int, int, const int32_t*);

}  // namespace loom::cpu
