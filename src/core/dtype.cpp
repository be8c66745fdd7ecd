#include "core/dtype.h"

namespace loom {

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "fp32" || s == "f32" || s == "float32") *out = DType::f32;
  else if (s == "bf16" || s == "bfloat16") *out = DType::bf16;
  else if (s == "fp16" || s == "f16" || s == "float16") *out = DType::f16;
  else return false;
  return true;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
f16 float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};  // NaN
  if (abs >= 0x47800000u) return f16{uint16_t(sign | 0x7c00u)};  // >= 65536: inf (also inf)
  int exp = int(abs >> 23) - 127;
  uint32_t mant = abs & 0x7fffffu;
  if (exp >= -14) {
    // Normal f16 range: keep 10 mantissa bits, round the 13 dropped bits.
    uint32_t h = (uint32_t(exp + 15) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;  // may carry into exponent: correct
    return f16{uint16_t(sign | h)};
  }
  if (exp < -25) return f16{sign};  // below half the smallest subnormal: zero
  // Subnormal: value = m * 2^-24 with m in [0, 1024).
  mant |= 0x800000u;                   // implicit 1
  int shift = -exp - 14 + 13;          // bits to drop: 14..24 (+13)
  uint32_t h = mant >> shift;
  uint32_t rest = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) h += 1;
  return f16{uint16_t(sign | h)};
}

float f16_to_float(f16 h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    float v = float(mant) * (1.0f / 16777216.0f);  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

void convert_f32_to_bf16(bf16* out, const float* in, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = float_to_bf16(in[i]);
}
void convert_bf16_to_f32(float* out, const bf16* in, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}
void convert_f32_to_f16(f16* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = float_to_f16(in[i]);
}
void convert_f16_to_f32(float* out, const f16* in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = f16_to_float(in[i]);
}

}  // namespace loom
