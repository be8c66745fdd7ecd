#include "kernels/cpu/cast.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

// GCC 12 reports the deliberately undefined registers inside its own AVX-512
// intrinsics (_mm512_undefined_epi32) as "maybe uninitialized": not ours.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace loom::cpu {

namespace {

// Below this many elements a thread team costs more than the copy.
constexpr size_t kParallelMin = size_t(1) << 16;

// Calls body(begin, end) on contiguous ranges covering [0, n), one per thread
// for large n; ranges start at multiples of 64 elements (whole cache lines).
template <class Body>
void for_ranges(size_t n, Body body) {
  if (n < kParallelMin) {
    body(size_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const size_t threads = size_t(omp_get_num_threads());
    const size_t per = ((n + threads - 1) / threads + 63) & ~size_t(63);
    const size_t begin = std::min(n, size_t(omp_get_thread_num()) * per);
    const size_t end = std::min(n, begin + per);
    if (begin < end) body(begin, end);
  }
}

void f32_to_bf16_range(bf16* out, const float* in, size_t i, size_t end) {
#if defined(__AVX512F__)
  // dtype.h's rounding done in integers: exact, and immune to the MXCSR
  // flags (vcvtneps2bf16 would flush subnormals to zero).
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= end; i += 16) {
    const __m512i u = _mm512_loadu_si512(in + i);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(round, lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
#elif defined(__AVX2__)
  // The same integer rounding, 8 lanes at a time.
  const __m256i one = _mm256_set1_epi32(1), round = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= end; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(round, lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);  // |u| as int32 >= 0
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
    // Every lane is in [0, 0xffff]: packing with unsigned saturation is exact;
    // it packs within 128-bit halves, so put the two 64-bit results together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
#endif
  for (; i < end; i++) out[i] = float_to_bf16(in[i]);
}

void bf16_to_f32_range(float* out, const bf16* in, size_t i, size_t end) {
#if defined(__AVX512F__)
  for (; i + 16 <= end; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(h, 16));
  }
#elif defined(__AVX2__)
  for (; i + 8 <= end; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(h, 16));
  }
#endif
  for (; i < end; i++) out[i] = bf16_to_float(in[i]);
}

// F16C rounds like dtype.h, but quiets signalling NaNs on the way to fp32
// where dtype.h keeps the bits: a block holding a NaN is redone by the scalar
// code (NaNs are rare, so this costs nothing in practice).
void f32_to_f16_range(f16* out, const float* in, size_t i, size_t end) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(__AVX512F__)
  for (; i + 16 <= end; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(x, kRound));
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
      for (size_t j = i; j < i + 16; j++) out[j] = float_to_f16(in[j]);
  }
#elif defined(__F16C__)
  for (; i + 8 <= end; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, kRound));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (size_t j = i; j < i + 8; j++) out[j] = float_to_f16(in[j]);
  }
#endif
  for (; i < end; i++) out[i] = float_to_f16(in[i]);
}

void f16_to_f32_range(float* out, const f16* in, size_t i, size_t end) {
#if defined(__AVX512F__)
  for (; i + 16 <= end; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, x);
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
      for (size_t j = i; j < i + 16; j++) out[j] = f16_to_float(in[j]);
  }
#elif defined(__F16C__)
  for (; i + 8 <= end; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, x);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (size_t j = i; j < i + 8; j++) out[j] = f16_to_float(in[j]);
  }
#endif
  for (; i < end; i++) out[i] = f16_to_float(in[i]);
}

}  // namespace

void cast_f32_to_bf16(bf16* out, const float* in, size_t n) {
  for_ranges(n, [&](size_t b, size_t e) { f32_to_bf16_range(out, in, b, e); });
}
void cast_bf16_to_f32(float* out, const bf16* in, size_t n) {
  for_ranges(n, [&](size_t b, size_t e) { bf16_to_f32_range(out, in, b, e); });
}
void cast_f32_to_f16(f16* out, const float* in, size_t n) {
  for_ranges(n, [&](size_t b, size_t e) { f32_to_f16_range(out, in, b, e); });
}
void cast_f16_to_f32(float* out, const f16* in, size_t n) {
  for_ranges(n, [&](size_t b, size_t e) { f16_to_f32_range(out, in, b, e); });
}

}  // namespace loom::cpu
