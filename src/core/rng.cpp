#include "core/rng.h"

#include <cmath>

namespace loom {

std::array<uint32_t, 4> Philox::block(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = uint64_t(kMul0) * c[0];
    uint64_t p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

static std::array<uint32_t, 4> draw(uint64_t seed, uint64_t stream, uint64_t index) {
  // key = seed; counter = (index, stream)
  return Philox::block({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                       {uint32_t(seed), uint32_t(seed >> 32)});
}

static double to_unit(uint32_t hi, uint32_t lo) {
  uint64_t bits53 = ((uint64_t(hi) << 32) | lo) >> 11;
  return (double(bits53) + 0.5) * (1.0 / 9007199254740992.0);  // in (0, 1)
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = draw(seed, stream, index);
  return to_unit(r[0], r[1]);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = draw(seed, stream, index);
  double u1 = to_unit(r[0], r[1]);
  double u2 = to_unit(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void rng_fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index, float mean,
                     float std) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = float(mean + std * rng_normal(seed, stream, first_index + uint64_t(i)));
}

uint64_t stable_hash(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ uint8_t(*s)) * 1099511628211ull;
  return h;
}

}  // namespace loom
