// Causal attention on the CPU: per-(b,h) matrix products through oneDNN's
// sgemm, reading the q/k/v slices of qkv in place (row stride C + 2 NKV hs).
//
// Rows are processed in tiles of kTile. Row tile [i0,i1) only needs key
// columns [0,i1), so the products skip (almost all of) the masked upper
// triangle: about 40% fewer flops at T=256.
//
// Threads split the B*NH (b,h) pairs in the forward pass and the B*NKV
// (b, kv head) pairs in the backward pass, which sums a kv head's gradient
// over its query heads in order, without races; each pair is done by one
// thread with single-threaded sgemm (oneDNN's OpenMP runtime runs sgemm on
// one thread when called inside a parallel region), so results do not
// depend on how the pairs are scheduled.
#include "kernels/cpu/attention.h"

#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/cpu/attention_common.h"

namespace loom::cpu {
namespace {

using detail::causal_softmax_row;
using detail::round16;
using detail::sgemm;
constexpr int kTile = detail::kAttnTile;


}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int NKV,
                       const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH, g = h / L.group;
    const float* row0 = qkv + int64_t(b) * T * R;
    const float* q = row0 + L.q(h);  // [T,hs], row stride R (also k, v)
    const float* k = row0 + L.k(g);
    const float* v = row0 + L.v(g);
    float* o = out + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
    float* p = att + int64_t(bh) * T * T;          // [T,T]
    for (int i0 = 0; i0 < T; i0 += kTile) {
      const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
      // Packed rows: the tile's keys before its first row's document are masked for all its rows.
      const int c0 = detail::doc_start(doc, int64_t(b) * T + i0);
      float* pt = p + int64_t(i0) * T;  // rows [i0,i1)
      // S[i0:i1, c0:i1] = scale * Q[i0:i1] K[c0:i1]^T
      sgemm('N', 'T', m, i1 - c0, hs, scale, q + i0 * R, R, k + c0 * R, R, 0.0f, pt + c0, T);
      for (int i = i0; i < i1; i++)
        causal_softmax_row(p + int64_t(i) * T, i + 1, T, detail::doc_start(doc, int64_t(b) * T + i));
      // O[i0:i1] = P[i0:i1, c0:i1] V[c0:i1]
      sgemm('N', 'N', m, hs, i1 - c0, 1.0f, pt + c0, T, v + c0 * R, R, 0.0f, o + int64_t(i0) * C, C);
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * L.NKV; bg++) {
    const int b = bg / L.NKV, g = bg % L.NKV;
    const int64_t row0 = int64_t(b) * T * R;
    const float* k = qkv + row0 + L.k(g);  // [T,hs], row stride R (also v, q, dk, dv, dq)
    const float* v = qkv + row0 + L.v(g);
    float* dk = dqkv + row0 + L.k(g);
    float* dv = dqkv + row0 + L.v(g);
    for (int h = g * L.group; h < (g + 1) * L.group; h++) {
      const float* q = qkv + row0 + L.q(h);
      float* dq = dqkv + row0 + L.q(h);
      const float* dO = dout + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
      const int64_t bh = int64_t(b) * NH + h;
      const float* p = att + bh * T * T;  // [T,T]
      float* ds = scratch + bh * T * T;   // [T,T]: dP, then dS
      for (int i0 = 0; i0 < T; i0 += kTile) {
        const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
        // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T
        sgemm('N', 'T', m, i1, hs, 1.0f, dO + int64_t(i0) * C, C, v, R, 0.0f, ds + int64_t(i0) * T, T);
        // Softmax backward: dS = P * (dP - rowsum(P * dP)); the scale goes into
        // the dQ/dK products below. P is 0 above the diagonal, so running the
        // loops past it (up to the tile's last computed column) adds nothing
        // and makes those dS entries 0, as the dK product expects.
        for (int i = i0; i < i1; i++) {
          const float* pr = p + int64_t(i) * T;
          float* dr = ds + int64_t(i) * T;
          const int lenp = round16(i + 1, i1);
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < lenp; j++) dot += pr[j] * dr[j];
#pragma omp simd
          for (int j = 0; j < lenp; j++) dr[j] = pr[j] * (dr[j] - dot);
          std::fill(dr + lenp, dr + i1, 0.0f);
        }
        // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1]
        sgemm('N', 'N', m, hs, i1, scale, ds + int64_t(i0) * T, T, k, R, 0.0f, dq + i0 * R, R);
      }
      // Key/value rows j only receive gradient from query rows i >= j, so
      // column tile [j0,j1) reads rows [j0,T) of P and dS (all written above).
      // The group's first head writes dK, dV; the others add to them.
      const float beta = h == g * L.group ? 0.0f : 1.0f;
      for (int j0 = 0; j0 < T; j0 += kTile) {
        const int j1 = std::min(T, j0 + kTile), n = j1 - j0, rows = T - j0;
        const int64_t off = int64_t(j0) * T + j0;  // element [j0, j0]
        // dV[j0:j1] (+)= P[j0:T, j0:j1]^T dO[j0:T]
        sgemm('T', 'N', n, hs, rows, 1.0f, p + off, T, dO + int64_t(j0) * C, C, beta, dv + j0 * R, R);
        // dK[j0:j1] (+)= scale * dS[j0:T, j0:j1]^T Q[j0:T]
        sgemm('T', 'N', n, hs, rows, scale, ds + off, T, q + j0 * R, R, beta, dk + j0 * R, R);
      }
    }
  }
}

}  // namespace loom::cpu
