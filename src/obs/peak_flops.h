// Measured fp32 peak of this machine: a tight loop of independent vector FMAs
// on every thread (no memory traffic), the ceiling matmuls are judged against.
#pragma once

namespace loom {

// GFLOP/s summed over `threads` threads, measured for about `seconds`.
double measure_peak_gflops(int threads, double seconds = 0.05);

}  // namespace loom
