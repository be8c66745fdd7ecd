// GFLOP/s of the linear-layer products at GPT-2 124M shapes (B*T = 1024).
// Usage: OMP_NUM_THREADS=2 build/bench/matmul_bench
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/cpu/matmul.h"

int main() {
  loom::cpu::MatmulEngine eng;
  const int N = 1024;
  struct Shape {
    const char* name;
    int C, OC;
  } shapes[] = {{"qkv", 768, 2304}, {"attn_proj", 768, 768}, {"fc", 768, 3072}, {"fc_proj", 3072, 768},
                {"lm_head", 768, 50304}};
  std::printf("threads %d\n%-10s %10s %10s %10s  %s\n", omp_get_max_threads(), "layer", "fwd GF/s", "dinp GF/s",
              "dW GF/s", "impl (fwd / dinp / dW)");
  for (auto s : shapes) {
    std::vector<float> x(size_t(N) * s.C, 0.01f), w(size_t(s.OC) * s.C, 0.02f), b(s.OC, 0.f),
        y(size_t(N) * s.OC, 0.f), dw(w.size(), 0.f);
    double flops = 2.0 * N * s.C * s.OC;
    auto time = [&](auto fn) {
      fn();
      auto t0 = std::chrono::steady_clock::now();
      int reps = 5;
      for (int i = 0; i < reps; i++) fn();
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      return flops / sec * 1e-9;
    };
    double f = time([&] { eng.gemm(y.data(), x.data(), w.data(), b.data(), N, s.OC, s.C, false, true, false); });
    double d = time([&] { eng.gemm(x.data(), y.data(), w.data(), nullptr, N, s.C, s.OC, false, false, false); });
    double g = time([&] { eng.gemm(dw.data(), y.data(), x.data(), nullptr, s.OC, s.C, N, true, false, true); });
    std::printf("%-10s %10.1f %10.1f %10.1f  %s / %s / %s\n", s.name, f, d, g,
                eng.implementation(N, s.OC, s.C, false, true, true, false),
                eng.implementation(N, s.C, s.OC, false, false, false, false),
                eng.implementation(s.OC, s.C, N, true, false, false, true));
  }
}
