// Counter-based random numbers (Philox4x32-10).
//
// A value depends only on (seed, stream, index): the stream names a
// parameter tensor and the index is the element's position in the *global*
// tensor. So a rank that owns a slice of a tensor fills exactly the values
// the single-process run would have put there, whatever the parallel layout.
#pragma once

#include <array>
#include <cstdint>

namespace loom {

struct Philox {
  // Four 32-bit outputs for one 128-bit counter under a 64-bit key.
  static std::array<uint32_t, 4> block(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
};

// Uniform in (0, 1), 53-bit resolution.
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on one Philox block).
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fills out[i] = mean + std * normal(seed, stream, first_index + i) for i < n.
void rng_fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index, float mean,
                     float std);

// Stable 64-bit hash of a string (FNV-1a), used to turn a parameter's global
// name into its stream id.
uint64_t stable_hash(const char* s);

}  // namespace loom
