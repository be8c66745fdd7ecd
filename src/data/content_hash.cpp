#include "data/content_hash.h"

#include <cstring>

#include "core/check.h"

namespace loom {
namespace {

constexpr uint64_t kMul1 = 0x9e3779b97f4a7c15ull, kMul2 = 0xbf58476d1ce4e5b9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t mix(uint64_t state, uint64_t word) { return rotl(state ^ (word * kMul1), 29) * kMul2; }

}  // namespace

ContentHash& ContentHash::add(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += bytes;
  for (; bytes >= 8; p += 8, bytes -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    state_ = mix(state_, w);
  }
  if (bytes > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, bytes);
    state_ = mix(state_, w ^ (uint64_t(bytes) << 59));
  }
  return *this;
}

uint64_t ContentHash::value() const {
  // A final avalanche (splitmix64's), so that every input bit reaches every output bit.
  uint64_t z = state_ ^ length_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string hash_hex(uint64_t h) { return strprintf("%016llx", (unsigned long long)h); }

}  // namespace loom
