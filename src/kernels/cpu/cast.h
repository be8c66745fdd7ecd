// Bulk conversions between fp32 and the 16-bit compute types.
//
// Bit for bit the scalar conversions of core/dtype.h (round to nearest, ties
// to even; NaN stays a quiet NaN with its top payload bits; inf and
// subnormals exact; fp16 overflow to inf), independent of the MXCSR
// denormal flags. Vectorized with AVX-512 where the build targets it, else
// AVX2 (bf16 in integer lanes; fp16 through F16C's vcvtps2ph / vcvtph2ps),
// and split over the OpenMP threads for large arrays. out and in must not
// overlap.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace loom::cpu {

void cast_f32_to_bf16(bf16* out, const float* in, size_t n);
void cast_bf16_to_f32(float* out, const bf16* in, size_t n);
void cast_f32_to_f16(f16* out, const float* in, size_t n);
void cast_f16_to_f32(float* out, const f16* in, size_t n);

// The same as overloads, for code templated over the 16-bit type.
inline void narrow(bf16* out, const float* in, size_t n) { cast_f32_to_bf16(out, in, n); }
inline void narrow(f16* out, const float* in, size_t n) { cast_f32_to_f16(out, in, n); }
inline void widen(float* out, const bf16* in, size_t n) { cast_bf16_to_f32(out, in, n); }
inline void widen(float* out, const f16* in, size_t n) { cast_f16_to_f32(out, in, n); }

}  // namespace loom::cpu
