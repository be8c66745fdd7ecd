#include "model/lora/lora_product.h"

#include <cstring>
#include <type_traits>

namespace loom::lora {
namespace {

// C[M,N] (+)= op(A)[M,K] op(B)[K,N] on the engine the layers use: fp32
// operands on its fp32 engine, 16-bit ones on the 16-bit engine.
template <class A>
void mm(Backend& eng, float* c, const A* a, const A* b, int64_t M, int64_t N, int64_t K, bool ta,
        bool tb, bool accumulate) {
  eng.gemm(c, a, b, M, N, K, ta, tb, accumulate);
}

float to_f32(float v) { return v; }
float to_f32(bf16 v) { return bf16_to_float(v); }
float to_f32(f16 v) { return f16_to_float(v); }
template <class T>
T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, bf16>) return float_to_bf16(v);
  else return float_to_f16(v);
}

// An fp32 array as the product's operand type: itself for fp32, else
// rounded once into `to`.
template <class A>
const A* as_operand(Backend& eng, const float* v, A* to, size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    (void)eng, (void)to, (void)n;
    return v;
  } else {
    eng.narrow(to, v, n);
    return to;
  }
}

// The work space carved: fp32 u, du, scale u [N, r] and t [N, out], then the
// 16-bit copies (u, du, scale u, and dy's block made contiguous).
struct Work {
  float *u, *du, *us, *t;
  void *u16, *du16, *us16, *dy16;
  Work(float* w, const Shape& s) {
    const size_t nr = size_t(s.N) * s.rank, no = size_t(s.N) * s.out;
    u = w, du = u + nr, us = du + nr, t = us + nr;
    float* half = t + no;  // 16-bit arrays, each rounded up to whole floats
    u16 = half, du16 = half + (nr + 1) / 2, us16 = half + 2 * ((nr + 1) / 2), dy16 = half + 3 * ((nr + 1) / 2);
  }
};

}  // namespace

size_t work_floats(const Shape& s) {
  const size_t nr = size_t(s.N) * s.rank, no = size_t(s.N) * s.out;
  return 3 * nr + no + 3 * ((nr + 1) / 2) + (no + 1) / 2;
}

template <class A, class Y>
void forward(Backend& eng, Y* y, int64_t ldy, const A* x, const A* a, const A* b, const Shape& s,
             float* work) {
  Work w(work, s);
  const size_t nr = size_t(s.N) * s.rank;
  mm<A>(eng, w.u, x, a, s.N, s.rank, s.in, false, true, false);  // u[N, r] = x a^T
  const A* u = as_operand<A>(eng, w.u, static_cast<A*>(w.u16), nr);
  mm<A>(eng, w.t, u, b, s.N, s.out, s.rank, false, true, false);  // t[N, out] = u b^T
  for (int n = 0; n < s.N; n++) {
    Y* row = y + int64_t(n) * ldy;
    const float* t = w.t + size_t(n) * s.out;
    for (int j = 0; j < s.out; j++) row[j] = from_f32<Y>(to_f32(row[j]) + s.scale * t[j]);
  }
}

template <class A>
void backward(Backend& eng, float* dx, float* da, float* db, const A* dy, int64_t ldy, const A* x,
              const A* a, const A* b, const Shape& s, float* work) {
  Work w(work, s);
  const size_t nr = size_t(s.N) * s.rank;
  // dy's block, contiguous [N, out].
  const A* dyc = dy;
  if (ldy != s.out) {
    A* to = static_cast<A*>(w.dy16);
    if constexpr (std::is_same_v<A, float>) to = w.t;
    for (int n = 0; n < s.N; n++)
      std::memcpy(to + size_t(n) * s.out, dy + int64_t(n) * ldy, size_t(s.out) * sizeof(A));
    dyc = to;
  }
  // du[N, r] = scale dy b.
  mm<A>(eng, w.du, dyc, b, s.N, s.rank, s.out, false, false, false);
  for (size_t i = 0; i < nr; i++) w.du[i] *= s.scale;
  const A* du = as_operand<A>(eng, w.du, static_cast<A*>(w.du16), nr);
  if (dx) mm<A>(eng, dx, du, a, s.N, s.in, s.rank, false, false, true);  // dx[N, in] += du a
  if (da) mm<A>(eng, da, du, x, s.rank, s.in, s.N, true, false, true);   // da[r, in] += du^T x
  if (db) {
    // db[out, r] += dy^T (scale u), u = x a^T again.
    mm<A>(eng, w.u, x, a, s.N, s.rank, s.in, false, true, false);
    for (size_t i = 0; i < nr; i++) w.us[i] = s.scale * w.u[i];
    const A* us = as_operand<A>(eng, w.us, static_cast<A*>(w.us16), nr);
    mm<A>(eng, db, dyc, us, s.out, s.rank, s.N, true, false, true);
  }
}

#define LOOM_LORA(A)                                                                                               \
  template void forward<A, A>(Backend&, A*, int64_t, const A*, const A*, const A*, const Shape&,     \
                              float*);                                                                             \
  template void backward<A>(Backend&, float*, float*, float*, const A*, int64_t, const A*, const A*, \
                            const A*, const Shape&, float*);
LOOM_LORA(float)
LOOM_LORA(bf16)
LOOM_LORA(f16)
#undef LOOM_LORA
template void forward<bf16, float>(Backend&, float*, int64_t, const bf16*, const bf16*, const bf16*,
                                   const Shape&, float*);
template void forward<f16, float>(Backend&, float*, int64_t, const f16*, const f16*, const f16*,
                                  const Shape&, float*);

}  // namespace loom::lora
