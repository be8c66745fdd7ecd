// Measured fp32 peak of this machine: a tight loop of independent vector FMAs
// on every thread (no memory traffic), the ceiling matmuls are judged against.
#pragma once

#include <cstddef>

namespace loom {

// GFLOP/s summed over `threads` threads, measured for about `seconds`.
double measure_peak_gflops(int threads, double seconds = 0.05);

// The bf16 peak, measured the same way with bf16 dot products (vdpbf16ps:
// 16 lanes x 2 products x 2 FLOPs); 0 where the build has no avx512_bf16
// (callers check the CPU has it: cpu::native_bf16_products()).
double measure_bf16_peak_gflops(int threads, double seconds = 0.05);

// Memory traffic (bytes read + written per second, GB/s) of a parallel copy
// over `threads` threads of buffers far larger than the caches.
double measure_memory_gbps(int threads, size_t mib = 128);

}  // namespace loom
