#include "obs/peak_flops.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace loom {
namespace {

// FLOPs done by one call: accumulators x lanes x 2 (mul+add) x iters. The
// accumulators (plus a and b) must fit in the vector registers, or spills
// add loads and stores to the loop: 16 of AVX-512's 32, 12 of AVX2's 16.
double fma_loop(long iters, float* sink) {
#if defined(__AVX512F__)
  using vec = __m512;
  constexpr int lanes = 16, accs = 16;
  auto fma = [](vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); };
  auto add = [](vec a, vec b) { return _mm512_add_ps(a, b); };
  auto first = [](vec a) { return _mm512_cvtss_f32(a); };
  vec acc[accs];
  for (int i = 0; i < accs; i++) acc[i] = _mm512_set1_ps(float(i));
  vec a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#else
  using vec = __m256;
  constexpr int lanes = 8, accs = 12;
  auto fma = [](vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); };
  auto add = [](vec a, vec b) { return _mm256_add_ps(a, b); };
  auto first = [](vec a) { return _mm256_cvtss_f32(a); };
  vec acc[accs];
  for (int i = 0; i < accs; i++) acc[i] = _mm256_set1_ps(float(i));
  vec a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
#endif
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < accs; i++) acc[i] = fma(acc[i], a, b);
  vec sum = acc[0];
  for (int i = 1; i < accs; i++) sum = add(sum, acc[i]);
  *sink = first(sum);
  return double(accs) * lanes * 2.0 * double(iters);
}

#if defined(__AVX512BF16__)
double bf16_dot_loop(long iters, float* sink) {
  constexpr int accs = 16;
  __m512 acc[accs];
  for (int i = 0; i < accs; i++) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3400);  // 1, 2^-23
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < accs; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < accs; i++) sum = _mm512_add_ps(sum, acc[i]);
  *sink = _mm512_cvtss_f32(sum);
  return double(accs) * 16 * 2 * 2 * double(iters);
}
#endif

// Best GFLOP/s of `loop` on `threads` threads over about `seconds`.
template <class Loop>
double measure_loop(Loop loop, int threads, double seconds) {
  float sink[64] = {0};
  double best = 0;
  // A few rounds; keep the best (the first may run before clocks ramp up).
  for (int round = 0; round < 3; round++) {
    long iters = 1 << 16;
    double flops = 0, elapsed = 0;
    while (elapsed < seconds / 3) {
      auto t0 = std::chrono::steady_clock::now();
      double per_thread = 0;
#pragma omp parallel num_threads(threads) reduction(max : per_thread)
      per_thread = loop(iters, &sink[omp_get_thread_num() % 64]);
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      flops = per_thread * threads;
      iters *= 2;
    }
    best = std::max(best, flops / elapsed * 1e-9);
  }
  return best;
}

}  // namespace

double measure_bf16_peak_gflops(int threads, double seconds) {
#if defined(__AVX512BF16__)
  return measure_loop(bf16_dot_loop, threads, seconds);
#else
  (void)threads, (void)seconds;
  return 0;
#endif
}

double measure_memory_gbps(int threads, size_t mib) {
  const size_t n = (mib << 20) / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) b[i] = a[i];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * double(n) * sizeof(float) / s * 1e-9);
    std::swap(a, b);
  }
  return best;
}

double measure_peak_gflops(int threads, double seconds) { return measure_loop(fma_loop, threads, seconds); }

}  // namespace loom
