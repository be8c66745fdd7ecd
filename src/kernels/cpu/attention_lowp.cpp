// 16-bit causal attention on the CPU, organized like attention.cpp: threads
// split the B*NH (b,h) pairs (forward) or the B*NKV (b, kv head) pairs
// (backward: a kv head's dK, dV sum over its query heads in an fp32 panel,
// in head order, rounded once at the end), each pair is done by one thread
// with single-threaded oneDNN products (so results do not depend on
// scheduling), and query rows go in tiles of kTile that skip the masked
// upper triangle.
//
// Native bf16 (CPUs with avx512_bf16, kernels/cpu/isa.h): the products run
// in oneDNN's bf16 x bf16 -> fp32 gemm (vdpbf16ps), reading q, k, v and the
// stored P in place; fp32 operands (dO, dS) are rounded to bf16 first, into
// the thread's work slice.
// Widened (fp16 always, bf16 elsewhere): the head's q, k, v and P are
// widened (exactly) to fp32 in the work slice, a panel of T x hs (or T x T)
// per head, and multiplied with sgemm, as in attention.cpp.
// Either way each output tile is produced in fp32 and rounded once.
#include "kernels/cpu/attention_lowp.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/isa.h"

// Row-major like dnnl_sgemm, C[M,N] = alpha op(A) op(B) + beta C, with bf16
// A and B and fp32 sums. libdnnl 2.x exports it (C linkage) but leaves it
// out of its public headers; oneDNN's own tests declare it this way.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const loom::bf16* A, dnnl_dim_t lda, const loom::bf16* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);

namespace loom::cpu {
namespace {

using detail::causal_softmax_row;
using detail::round16;
constexpr int kTile = detail::kAttnTile;

// Failures mean bad arguments (a bug); inside the parallel region the throw
// ends the program.
void gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda, const bf16* Bm,
          int64_t ldb, float beta, float* Cm, int64_t ldc) {
  dnnl_status_t st = dnnl_gemm_bf16bf16f32(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  LOOM_CHECK(st == dnnl_success, "dnnl_gemm_bf16bf16f32 failed (status %d)", int(st));
}
void gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* Bm, int64_t ldb, float beta, float* Cm, int64_t ldc) {
  detail::sgemm(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}

inline float to_float(bf16 x) { return bf16_to_float(x); }  // inline: vectorizes
inline float to_float(float x) { return x; }

// Copies rows [r0,r1) of width w between a strided 16-bit matrix (row stride
// ld) and a packed fp32 one, converting.
template <class A>
void narrow_rows(A* dst, int64_t ld, const float* src, int r0, int r1, int w) {
  for (int r = r0; r < r1; r++) narrow(dst + r * ld, src + int64_t(r - r0) * w, size_t(w));
}
template <class H>
void widen_rows(float* dst, const H* src, int64_t ld, int rows, int w) {
  for (int r = 0; r < rows; r++) widen(dst + int64_t(r) * w, src + r * ld, size_t(w));
}

// Work-slice pieces are rounded up to 16 floats (whole cache lines).
size_t pad(size_t floats) { return (floats + 15) & ~size_t(15); }
size_t pad16bit(size_t n) { return pad((n + 1) / 2); }  // n 16-bit values, in floats

// Floats per thread: the largest of the four layouts below.
size_t slice_floats(int T, int hs) {
  const size_t t = size_t(T), h = size_t(hs), tile = size_t(std::min(T, kTile));
  const size_t fwd_bf16 = pad(tile * t) + pad(tile * h);                  // S/P tile, O tile
  const size_t fwd_f16 = 3 * pad(t * h) + pad(tile * t) + pad(tile * h);  // q k v, S/P tile, O tile
  // dO, dS (bf16), dQ tile, dK dV sums
  const size_t bwd_bf16 = pad16bit(t * h) + pad16bit(t * t) + pad(tile * h) + 2 * pad(t * h);
  const size_t bwd_f16 = 5 * pad(t * h) + pad(t * t) + pad(tile * h);  // q k v, P, dQ tile, dK dV sums
  return std::max({fwd_bf16, fwd_f16, bwd_bf16, bwd_f16});
}

// Softmax backward on rows [i0,i1) of one head, in place on ds (fp32, row
// stride T): dS = P * (dP - rowsum(P * dP)), as in attention.cpp. P is 0
// above the diagonal, so running past it (to the tile's last column) makes
// those dS entries 0, as the dK product expects.
template <class P>
void softmax_backward_rows(float* ds, const P* p, int i0, int i1, int T) {
  for (int i = i0; i < i1; i++) {
    const P* pr = p + int64_t(i) * T;
    float* dr = ds + int64_t(i) * T;
    const int lenp = round16(i + 1, i1);
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < lenp; j++) dot += to_float(pr[j]) * dr[j];
#pragma omp simd
    for (int j = 0; j < lenp; j++) dr[j] = to_float(pr[j]) * (dr[j] - dot);
    std::fill(dr + lenp, dr + i1, 0.0f);
  }
}

}  // namespace

size_t attention_lowp_work_floats(int T, int C, int NH, int NKV, int threads) {
  return size_t(threads > 0 ? threads : omp_get_max_threads()) * slice_floats(T, detail::qkv_layout(C, NH, NKV).hs);
}

void attention_forward_native(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH,
                              int NKV, const int32_t* doc) {
  LOOM_USER_CHECK(native_bf16_products(), "native bf16 attention needs avx512_bf16; the kernels run at %s",
                  isa_name(kernel_isa()));
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t slice = slice_floats(T, hs);
#pragma omp parallel
  {
    float* s = work + size_t(omp_get_thread_num()) * slice;  // [kTile,T]: scores, then probabilities
    float* o = s + pad(size_t(std::min(T, kTile)) * T);        // [kTile,hs]
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
      const int b = bh / NH, h = bh % NH, g = h / L.group;
      const bf16* row0 = qkv + int64_t(b) * T * R;
      const bf16* q = row0 + L.q(h);  // [T,hs], row stride R (also k, v)
      const bf16* k = row0 + L.k(g);
      const bf16* v = row0 + L.v(g);
      bf16* ob = out + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
      bf16* p = att + int64_t(bh) * T * T;           // [T,T]
      for (int i0 = 0; i0 < T; i0 += kTile) {
        const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
        const int c0 = detail::doc_start(doc, int64_t(b) * T + i0);  // packed rows: keys before are masked
        // S[0:m, c0:i1] = scale * Q[i0:i1] K[c0:i1]^T
        gemm('N', 'T', m, i1 - c0, hs, scale, q + i0 * R, R, k + c0 * R, R, 0.0f, s + c0, T);
        for (int i = i0; i < i1; i++)
          causal_softmax_row(s + int64_t(i - i0) * T, i + 1, T, detail::doc_start(doc, int64_t(b) * T + i));
        narrow_rows(p, T, s, i0, i1, T);  // whole rows: the zeros too
        // O[i0:i1] = P[i0:i1, c0:i1] V[c0:i1], from the stored (rounded) P
        gemm('N', 'N', m, hs, i1 - c0, 1.0f, p + int64_t(i0) * T + c0, T, v + c0 * R, R, 0.0f, o, hs);
        narrow_rows(ob, C, o, i0, i1, hs);
      }
    }
  }
}

template <class H>
void attention_forward_widened(H* out, H* att, const H* qkv, float* work, int B, int T, int C, int NH, int NKV,
                               const int32_t* doc) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t slice = slice_floats(T, hs), th = pad(size_t(T) * hs);
#pragma omp parallel
  {
    float* qw = work + size_t(omp_get_thread_num()) * slice;  // [T,hs] each: q, k, v widened
    float* kw = qw + th;
    float* vw = kw + th;
    float* s = vw + th;                                  // [kTile,T]
    float* o = s + pad(size_t(std::min(T, kTile)) * T);  // [kTile,hs]
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
      const int b = bh / NH, h = bh % NH, g = h / L.group;
      const H* row0 = qkv + int64_t(b) * T * R;  // q, k, v: [T,hs], row stride R
      widen_rows(qw, row0 + L.q(h), R, T, hs);
      widen_rows(kw, row0 + L.k(g), R, T, hs);
      widen_rows(vw, row0 + L.v(g), R, T, hs);
      H* ob = out + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
      H* p = att + int64_t(bh) * T * T;           // [T,T]
      for (int i0 = 0; i0 < T; i0 += kTile) {
        const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
        const int c0 = detail::doc_start(doc, int64_t(b) * T + i0);  // packed rows: keys before are masked
        gemm('N', 'T', m, i1 - c0, hs, scale, qw + int64_t(i0) * hs, hs, kw + int64_t(c0) * hs, hs, 0.0f, s + c0, T);
        for (int i = i0; i < i1; i++) {
          float* row = s + int64_t(i - i0) * T;
          causal_softmax_row(row, i + 1, T, detail::doc_start(doc, int64_t(b) * T + i));
          narrow(p + int64_t(i) * T, row, size_t(T));
          widen(row, p + int64_t(i) * T, size_t(i1));  // the rounded P, for O
        }
        gemm('N', 'N', m, hs, i1 - c0, 1.0f, s + c0, T, vw + int64_t(c0) * hs, hs, 0.0f, o, hs);
        narrow_rows(ob, C, o, i0, i1, hs);
      }
    }
  }
}

void attention_backward_native(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv,
                               const bf16* att, int B, int T, int C, int NH, int NKV) {
  LOOM_USER_CHECK(native_bf16_products(), "native bf16 attention needs avx512_bf16; the kernels run at %s",
                  isa_name(kernel_isa()));
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t slice = slice_floats(T, hs), th = pad(size_t(T) * hs);
#pragma omp parallel
  {
    float* w = work + size_t(omp_get_thread_num()) * slice;
    bf16* dOb = reinterpret_cast<bf16*>(w);                           // [T,hs]: dO rounded
    bf16* dSb = reinterpret_cast<bf16*>(w + pad16bit(size_t(T) * hs));  // [T,T]: dS rounded
    float* tile = w + pad16bit(size_t(T) * hs) + pad16bit(size_t(T) * T);  // [kTile,hs]
    float* dks = tile + pad(size_t(std::min(T, kTile)) * hs);            // [T,hs] each: dK, dV sums
    float* dvs = dks + th;
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * L.NKV; bg++) {
      const int b = bg / L.NKV, g = bg % L.NKV;
      const int64_t row0 = int64_t(b) * T * R;
      const bf16* k = qkv + row0 + L.k(g);  // [T,hs], row stride R (also v, q, dq)
      const bf16* v = qkv + row0 + L.v(g);
      for (int h = g * L.group; h < (g + 1) * L.group; h++) {
        const bf16* q = qkv + row0 + L.q(h);
        bf16* dq = dqkv + row0 + L.q(h);
        const float* dO = dout + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
        const int64_t bh = int64_t(b) * NH + h;
        const bf16* p = att + bh * T * T;   // [T,T]
        float* ds = scratch + bh * T * T;   // [T,T]: dP, then dS (fp32)
        for (int t = 0; t < T; t++) narrow(dOb + int64_t(t) * hs, dO + int64_t(t) * C, size_t(hs));
        for (int i0 = 0; i0 < T; i0 += kTile) {
          const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
          // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T
          gemm('N', 'T', m, i1, hs, 1.0f, dOb + int64_t(i0) * hs, hs, v, R, 0.0f, ds + int64_t(i0) * T, T);
          softmax_backward_rows(ds, p, i0, i1, T);
          for (int i = i0; i < i1; i++) narrow(dSb + int64_t(i) * T, ds + int64_t(i) * T, size_t(i1));
          // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1]
          gemm('N', 'N', m, hs, i1, scale, dSb + int64_t(i0) * T, T, k, R, 0.0f, tile, hs);
          narrow_rows(dq, R, tile, i0, i1, hs);
        }
        // Key/value rows j only get gradient from query rows i >= j: column
        // tile [j0,j1) reads rows [j0,T) of P and dS (all written above).
        // The group's first head writes the sums, the others add to them.
        const float beta = h == g * L.group ? 0.0f : 1.0f;
        for (int j0 = 0; j0 < T; j0 += kTile) {
          const int j1 = std::min(T, j0 + kTile), n = j1 - j0, rows = T - j0;
          const int64_t off = int64_t(j0) * T + j0;  // element [j0, j0]
          // dV[j0:j1] (+)= P[j0:T, j0:j1]^T dO[j0:T]
          gemm('T', 'N', n, hs, rows, 1.0f, p + off, T, dOb + int64_t(j0) * hs, hs, beta, dvs + int64_t(j0) * hs, hs);
          // dK[j0:j1] (+)= scale * dS[j0:T, j0:j1]^T Q[j0:T]
          gemm('T', 'N', n, hs, rows, scale, dSb + off, T, q + j0 * R, R, beta, dks + int64_t(j0) * hs, hs);
        }
      }
      narrow_rows(dqkv + row0 + L.k(g), R, dks, 0, T, hs);
      narrow_rows(dqkv + row0 + L.v(g), R, dvs, 0, T, hs);
    }
  }
}

template <class H>
void attention_backward_widened(H* dqkv, float* scratch, float* work, const float* dout, const H* qkv, const H* att,
                                int B, int T, int C, int NH, int NKV) {
  const detail::QkvLayout L = detail::qkv_layout(C, NH, NKV);
  const int hs = L.hs;
  const int64_t R = L.row;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t slice = slice_floats(T, hs), th = pad(size_t(T) * hs);
#pragma omp parallel
  {
    float* qw = work + size_t(omp_get_thread_num()) * slice;  // [T,hs] each: q, k, v widened
    float* kw = qw + th;
    float* vw = kw + th;
    float* pw = vw + th;                     // [T,T]: P widened
    float* tile = pw + pad(size_t(T) * T);  // [kTile,hs]
    float* dks = tile + pad(size_t(std::min(T, kTile)) * hs);  // [T,hs] each: dK, dV sums
    float* dvs = dks + th;
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * L.NKV; bg++) {
      const int b = bg / L.NKV, g = bg % L.NKV;
      const int64_t row0 = int64_t(b) * T * R;  // q, k, v, dq: [T,hs], row stride R
      widen_rows(kw, qkv + row0 + L.k(g), R, T, hs);
      widen_rows(vw, qkv + row0 + L.v(g), R, T, hs);
      for (int h = g * L.group; h < (g + 1) * L.group; h++) {
        const int64_t bh = int64_t(b) * NH + h;
        widen_rows(qw, qkv + row0 + L.q(h), R, T, hs);
        widen_rows(pw, att + bh * T * T, T, T, T);  // by rows: cast.h would split a T*T array over threads
        H* dq = dqkv + row0 + L.q(h);
        const float* dO = dout + int64_t(b) * T * C + h * hs;  // [T,hs], row stride C
        float* ds = scratch + bh * T * T;                      // [T,T]: dP, then dS
        for (int i0 = 0; i0 < T; i0 += kTile) {
          const int i1 = std::min(T, i0 + kTile), m = i1 - i0;
          gemm('N', 'T', m, i1, hs, 1.0f, dO + int64_t(i0) * C, C, vw, hs, 0.0f, ds + int64_t(i0) * T, T);
          softmax_backward_rows(ds, pw, i0, i1, T);
          gemm('N', 'N', m, hs, i1, scale, ds + int64_t(i0) * T, T, kw, hs, 0.0f, tile, hs);
          narrow_rows(dq, R, tile, i0, i1, hs);
        }
        const float beta = h == g * L.group ? 0.0f : 1.0f;  // first head writes the sums
        for (int j0 = 0; j0 < T; j0 += kTile) {
          const int j1 = std::min(T, j0 + kTile), n = j1 - j0, rows = T - j0;
          const int64_t off = int64_t(j0) * T + j0;
          gemm('T', 'N', n, hs, rows, 1.0f, pw + off, T, dO + int64_t(j0) * C, C, beta, dvs + int64_t(j0) * hs, hs);
          gemm('T', 'N', n, hs, rows, scale, ds + off, T, qw + int64_t(j0) * hs, hs, beta, dks + int64_t(j0) * hs,
               hs);
        }
      }
      narrow_rows(dqkv + row0 + L.k(g), R, dks, 0, T, hs);
      narrow_rows(dqkv + row0 + L.v(g), R, dvs, 0, T, hs);
    }
  }
}

template void attention_forward_widened(bf16*, bf16*, const bf16*, float*, int, int, int, int, int, const int32_t*);
template void attention_forward_widened(f16*, f16*, const f16*, float*, int, int, int, int, int, const int32_t*);
template void attention_backward_widened(bf16*, float*, float*, const float*, const bf16*, const bf16*, int, int, int,
                                         int, int);
template void attention_backward_widened(f16*, float*, float*, const float*, const f16*, const f16*, int, int, int,
                                         int, int);

void attention_forward(bf16* out, bf16* att, const bf16* qkv, float* work, int B, int T, int C, int NH, int NKV,
                       const int32_t* doc) {
  if (native_bf16_products()) attention_forward_native(out, att, qkv, work, B, T, C, NH, NKV, doc);
  else attention_forward_widened(out, att, qkv, work, B, T, C, NH, NKV, doc);
}
void attention_forward(f16* out, f16* att, const f16* qkv, float* work, int B, int T, int C, int NH, int NKV,
                       const int32_t* doc) {
  attention_forward_widened(out, att, qkv, work, B, T, C, NH, NKV, doc);
}
void attention_backward(bf16* dqkv, float* scratch, float* work, const float* dout, const bf16* qkv, const bf16* att,
                        int B, int T, int C, int NH, int NKV) {
  if (native_bf16_products()) attention_backward_native(dqkv, scratch, work, dout, qkv, att, B, T, C, NH, NKV);
  else attention_backward_widened(dqkv, scratch, work, dout, qkv, att, B, T, C, NH, NKV);
}
void attention_backward(f16* dqkv, float* scratch, float* work, const float* dout, const f16* qkv, const f16* att,
                        int B, int T, int C, int NH, int NKV) {
  attention_backward_widened(dqkv, scratch, work, dout, qkv, att, B, T, C, NH, NKV);
}

}  // namespace loom::cpu
