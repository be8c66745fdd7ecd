#include "kernels/cpu/non_finite.h"

#include <cstdint>
#include <cstring>

namespace loom::cpu {

namespace {
// Below this many elements a thread team costs more than it saves.
constexpr size_t kParallelMin = size_t(1) << 16;

// inf and NaN are exactly the floats whose exponent bits are all ones; the
// integer test vectorizes and never raises floating-point exceptions.
inline uint32_t non_finite_bit(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}
}  // namespace

bool has_non_finite(const float* x, size_t n) {
  uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (size_t i = 0; i < n; i++) bad |= non_finite_bit(x[i]);
  return bad != 0;
}

bool unscale_and_check(float* x, size_t n, float inv_scale) {
  uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= kParallelMin)
  for (size_t i = 0; i < n; i++) {
    const float v = x[i] * inv_scale;
    x[i] = v;
    bad |= non_finite_bit(v);
  }
  return bad != 0;
}

}  // namespace loom::cpu
