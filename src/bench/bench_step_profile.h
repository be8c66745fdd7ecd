// `loom bench step --profile`: where one step's time goes, per op kind and
// per op shape, as a share of the step and of each op's own limit (the FLOP
// peak of its precision, or memory bandwidth), measured in the same process.
#pragma once

#include "kernels/kernel_profile.h"
#include "precision/policy.h"

namespace loom::cli {

struct MachineLimits {
  double fp32_gflops = 0;  // FMA loop peak on the threads in use
  double bf16_gflops = 0;  // vdpbf16ps loop peak; 0: bf16 products widen to fp32
  double memory_gbps = 0;  // parallel copy, read + write
};
MachineLimits measure_machine_limits(int threads);

// Prints the tables for `steps` timed steps of `step_s` median seconds whose
// kernels went into `profile`.
// flops_per_token: the model's count (6N + 12·L·C·T), for the step's share of the peak.
void print_step_profile(const KernelProfile& profile, int steps, double step_s, double tokens_per_step,
                        double flops_per_token, ComputePrecision precision, const MachineLimits& limits);

}  // namespace loom::cli
