// Element types: f32, bf16, f16, and their conversions.
//
// bf16 and f16 are stored as raw 16-bit patterns. float -> 16-bit conversion
// rounds to nearest, ties to even; NaN stays NaN (quiet), overflow becomes inf
// (f16) exactly as IEEE 754 prescribes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace loom {

enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "fp32"/"f32"/"float32", "bf16"/"bfloat16", "fp16"/"f16"/"float16".
bool parse_dtype(const std::string& s, DType* out);

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x0040u)};  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest, ties to even
  return bf16{uint16_t(u >> 16)};
}
inline float bf16_to_float(bf16 h) { return bits_float(uint32_t(h.bits) << 16); }

// The DType of an element type: dtype_of<float>() == DType::f32, ...
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<f16>() { return DType::f16; }

f16 float_to_f16(float f);
float f16_to_float(f16 h);

// Bulk conversions (vectorized where the CPU allows).
void convert_f32_to_bf16(bf16* out, const float* in, size_t n);
void convert_bf16_to_f32(float* out, const bf16* in, size_t n);
void convert_f32_to_f16(f16* out, const float* in, size_t n);
void convert_f16_to_f32(float* out, const f16* in, size_t n);

}  // namespace loom
