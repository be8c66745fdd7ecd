// Tiles of kQ query rows against tiles of kK key rows; every product goes
// through oneDNN's sgemm on the q/k/v slices of qkv in place (row stride
// C + 2 NKV hs). Threads split the (b, h) pairs in forward and the (b, kv
// head) pairs in backward (a kv head's gradient summed over its query heads
// in order, without races), each pair on one thread, so results do not
// depend on scheduling.
#include "kernels/cpu/attention_tiled.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/attention_common.h"

namespace loom::cpu {
namespace {

constexpr int kQ = 64, kK = 64;
constexpr size_t kWorkPerThread = size_t(3) * kQ * kK + size_t(4) * kQ;

using detail::sgemm;

}  // namespace

size_t attention_tiled_work_floats(int threads) { return size_t(std::max(threads, 1)) * kWorkPerThread; }

void attention_tiled_forward(float* out, float* lse, const float* qkv, float* work, int B, int T, int C, int NH,
                             int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    float* w = work + size_t(omp_get_thread_num()) * kWorkPerThread;
    float* s = w;                      // [kQ, kK] scores, then probabilities
    float* row_max = w + kQ * kK * 3;  // [kQ]
    float* row_sum = row_max + kQ;     // [kQ]
    const int b = bh / NH, h = bh % NH, g = h / L.group;
    const float* row0 = qkv + int64_t(b) * T * R;
    const float* q = row0 + L.q(h);  // [T,hs], row stride R (also k, v)
    const float* k = row0 + L.k(g);
    const float* v = row0 + L.v(g);
    float* o = out + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C: the accumulator until the end
    float* l = lse + int64_t(bh) * T;
    for (int i0 = 0; i0 < T; i0 += kQ) {
      const int i1 = std::min(T, i0 + kQ), m = i1 - i0;
      std::fill(row_max, row_max + m, neg_inf);
      std::fill(row_sum, row_sum + m, 0.f);
      for (int i = i0; i < i1; i++) std::memset(o + int64_t(i) * C, 0, size_t(hs) * sizeof(float));
      for (int j0 = 0; j0 < i1; j0 += kK) {  // keys after the tile's last query are masked
        const int j1 = std::min(i1, j0 + kK), n = j1 - j0;
        // S[m, n] = scale Q[i0:i1] K[j0:j1]^T
        sgemm('N', 'T', m, n, hs, scale, q + i0 * R, R, k + j0 * R, R, 0.f, s, kK);
        for (int r = 0; r < m; r++) {
          float* sr = s + r * kK;
          const int valid = std::min(n, i0 + r + 1 - j0);  // causal: key j <= query i
          float mx = row_max[r];
          for (int c = 0; c < valid; c++) mx = std::max(mx, sr[c]);
          // Rescale what this row has summed so far to the new maximum.
          const float correction = row_max[r] == neg_inf ? 0.f : std::exp(row_max[r] - mx);
          float sum = 0.f;
          for (int c = 0; c < n; c++) {
            sr[c] = c < valid ? std::exp(sr[c] - mx) : 0.f;
            sum += sr[c];
          }
          row_sum[r] = row_sum[r] * correction + sum;
          row_max[r] = mx;
          float* orow = o + int64_t(i0 + r) * C;
          for (int d = 0; d < hs; d++) orow[d] *= correction;
        }
        // O[i0:i1] += P V[j0:j1]
        sgemm('N', 'N', m, hs, n, 1.f, s, kK, v + j0 * R, R, 1.f, o + int64_t(i0) * C, C);
      }
      for (int r = 0; r < m; r++) {
        float* orow = o + int64_t(i0 + r) * C;
        const float inv = 1.f / row_sum[r];
        for (int d = 0; d < hs; d++) orow[d] *= inv;
        l[i0 + r] = row_max[r] + std::log(row_sum[r]);
      }
    }
  }
}

void attention_tiled_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * L.NKV; bg++) {
    float* w = work + size_t(omp_get_thread_num()) * kWorkPerThread;
    float* p = w;                // [kQ, kK] probabilities
    float* dp = w + kQ * kK;     // [kQ, kK] their gradient, then the scores'
    float* dsum = w + kQ * kK * 3;  // [kQ]: rowsum(dO o O)
    const int b = bg / L.NKV, g = bg % L.NKV;
    const int64_t row0 = int64_t(b) * T * R;
    const float* k = qkv + row0 + L.k(g);  // [T,hs], row stride R (also v, q, dk, dv, dq)
    const float* v = qkv + row0 + L.v(g);
    float* dk = dqkv + row0 + L.k(g);
    float* dv = dqkv + row0 + L.v(g);
    for (int t = 0; t < T; t++) {
      std::memset(dk + int64_t(t) * R, 0, size_t(hs) * sizeof(float));
      std::memset(dv + int64_t(t) * R, 0, size_t(hs) * sizeof(float));
    }
    for (int h = g * L.group; h < (g + 1) * L.group; h++) {
      const float* q = qkv + row0 + L.q(h);
      float* dq = dqkv + row0 + L.q(h);
      const float* o = out + int64_t(b) * T * C + h * hs;  // row stride C (also dout)
      const float* dO = dout + int64_t(b) * T * C + h * hs;
      const float* l = lse + (int64_t(b) * NH + h) * T;
      for (int t = 0; t < T; t++) std::memset(dq + int64_t(t) * R, 0, size_t(hs) * sizeof(float));
      for (int i0 = 0; i0 < T; i0 += kQ) {
        const int i1 = std::min(T, i0 + kQ), m = i1 - i0;
        for (int r = 0; r < m; r++) {
          double d = 0;
          for (int c = 0; c < hs; c++) d += double(dO[int64_t(i0 + r) * C + c]) * o[int64_t(i0 + r) * C + c];
          dsum[r] = float(d);
        }
        for (int j0 = 0; j0 < i1; j0 += kK) {
          const int j1 = std::min(i1, j0 + kK), n = j1 - j0;
          // P = exp(scale Q K^T - lse), causal
          sgemm('N', 'T', m, n, hs, scale, q + i0 * R, R, k + j0 * R, R, 0.f, p, kK);
          for (int r = 0; r < m; r++) {
            const int valid = std::min(n, i0 + r + 1 - j0);
            for (int c = 0; c < n; c++) p[r * kK + c] = c < valid ? std::exp(p[r * kK + c] - l[i0 + r]) : 0.f;
          }
          // dV[j0:j1] += P^T dO[i0:i1]; dP = dO V^T
          sgemm('T', 'N', n, hs, m, 1.f, p, kK, dO + int64_t(i0) * C, C, 1.f, dv + j0 * R, R);
          sgemm('N', 'T', m, n, hs, 1.f, dO + int64_t(i0) * C, C, v + j0 * R, R, 0.f, dp, kK);
          // dS = P o (dP - rowsum(dO o O))
          for (int r = 0; r < m; r++)
            for (int c = 0; c < n; c++) dp[r * kK + c] = p[r * kK + c] * (dp[r * kK + c] - dsum[r]);
          // dQ[i0:i1] += scale dS K; dK[j0:j1] += scale dS^T Q
          sgemm('N', 'N', m, hs, n, scale, dp, kK, k + j0 * R, R, 1.f, dq + i0 * R, R);
          sgemm('T', 'N', n, hs, m, scale, dp, kK, q + i0 * R, R, 1.f, dk + j0 * R, R);
        }
      }
    }
  }
}

}  // namespace loom::cpu
