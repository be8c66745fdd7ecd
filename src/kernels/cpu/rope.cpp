#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cast.h"

namespace loom::cpu {

namespace {

// One row's H = NH + NKV query and key heads, x[H, hd], rotated by the
// position's c[hd/2], s[hd/2] (sign = -1: by the opposite angle; negating s
// is exact, so the transpose is the same arithmetic). Not inlined: the fp32
// and 16-bit kernels run this very code.
[[gnu::noinline]] void rope_row(float* x, const float* c, const float* s, int H, int hd, float sign) {
  const int half = hd / 2;
  for (int h = 0; h < H; h++) {
    float* lo = x + size_t(h) * hd;  // [half]: x[i]
    float* hi = lo + half;           // [half]: x[i + hd/2]
#pragma omp simd
    for (int i = 0; i < half; i++) {
      const float a = lo[i], b = hi[i], si = sign * s[i];
      lo[i] = a * c[i] - b * si;
      hi[i] = b * c[i] + a * si;
    }
  }
}

void check_shape(int T, int NH, int NKV, int hd) {
  LOOM_CHECK(T > 0 && NH > 0 && NKV > 0 && hd > 0 && hd % 2 == 0, "rope: T=%d NH=%d NKV=%d hd=%d (hd must be even)",
             T, NH, NKV, hd);
}

// The table row of token row n.
inline size_t table_row(int n, int T, const int32_t* pos) { return size_t(pos ? pos[n] : n % T); }

void rope_fp32(float* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
               const int32_t* pos, float sign) {
  check_shape(T, NH, NKV, hd);
  const size_t row = size_t(NH + 2 * NKV) * hd, half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t r = table_row(n, T, pos) * half;
    rope_row(qkv + n * row, cos + r, sin + r, NH + NKV, hd, sign);
  }
}

// The q and k heads lead the row, so each row widens one run of
// (NH + NKV) hd values into a per-thread fp32 buffer and rounds it back.
template <class A>
void rope_lowp(A* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd, const int32_t* pos,
               float sign) {
  check_shape(T, NH, NKV, hd);
  const size_t row = size_t(NH + 2 * NKV) * hd, qk = size_t(NH + NKV) * hd, half = hd / 2;
#pragma omp parallel
  {
    std::vector<float> x(qk);  // [NH + NKV, hd]
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      widen(x.data(), qkv + n * row, qk);
      const size_t r = table_row(n, T, pos) * half;
      rope_row(x.data(), cos + r, sin + r, NH + NKV, hd, sign);
      narrow(qkv + n * row, x.data(), qk);
    }
  }
}

}  // namespace

void rope_table(float* cos, float* sin, int T, int hd, double theta, const int32_t* positions) {
  check_shape(T, 1, 1, hd);
  std::vector<double> inv_freq(size_t(hd / 2));
  for (int i = 0; i < hd / 2; i++) inv_freq[size_t(i)] = std::pow(theta, -2.0 * i / hd);
  rope_table(cos, sin, T, hd, inv_freq.data(), positions);
}

void rope_table(float* cos, float* sin, int T, int hd, const double* inv_freq, const int32_t* positions) {
  check_shape(T, 1, 1, hd);
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    for (int t = 0; t < T; t++) {
      const double angle = (positions ? positions[t] : t) * inv_freq[i];
      cos[size_t(t) * half + i] = float(std::cos(angle));
      sin[size_t(t) * half + i] = float(std::sin(angle));
    }
  }
}

void rope_forward(float* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_fp32(qkv, cos, sin, N, T, NH, NKV, hd, pos, 1.0f);
}
void rope_forward(bf16* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_lowp(qkv, cos, sin, N, T, NH, NKV, hd, pos, 1.0f);
}
void rope_forward(f16* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_lowp(qkv, cos, sin, N, T, NH, NKV, hd, pos, 1.0f);
}
void rope_backward(float* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_fp32(dqkv, cos, sin, N, T, NH, NKV, hd, pos, -1.0f);
}
void rope_backward(bf16* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_lowp(dqkv, cos, sin, N, T, NH, NKV, hd, pos, -1.0f);
}
void rope_backward(f16* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                   const int32_t* pos) {
  rope_lowp(dqkv, cos, sin, N, T, NH, NKV, hd, pos, -1.0f);
}

}  // namespace loom::cpu
