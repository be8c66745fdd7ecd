// GFLOP/s of the linear-layer products at GPT-2 124M shapes (B*T = 1024):
// fp32 (MatmulEngine) and bf16 with fp32 accumulation (LowpMatmulEngine),
// with the implementation each one picked (native bf16, or widened to fp32
// where the CPU lacks avx512_bf16), then the fp16 path (operands widened to
// fp32 in panels with F16C, then the fp32 product). Starts with the CPU line.
// Usage: OMP_NUM_THREADS=2 build/bench/matmul_bench   (LOOM_MAX_CPU_ISA=avx2: the widened bf16 path)
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_lowp.h"

namespace {

struct Shape {
  const char* name;
  int C, OC;
};

// GFLOP/s of fn, a product of `flops`, averaged over a few calls after one warm-up.
template <class Fn>
double gflops(double flops, Fn fn) {
  fn();
  const int reps = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; i++) fn();
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  return flops / sec * 1e-9;
}

}  // namespace

int main() {
  loom::cpu::cap_isa(std::nullopt);  // LOOM_MAX_CPU_ISA, as for loom itself
  std::printf("%s\n", loom::cpu::describe_dispatch().line().c_str());
  loom::cpu::MatmulEngine eng;
  loom::cpu::LowpMatmulEngine lowp;
  const int N = 1024;
  const Shape shapes[] = {{"qkv", 768, 2304}, {"attn_proj", 768, 768}, {"fc", 768, 3072}, {"fc_proj", 3072, 768}, {"llama_down", 2048, 768},
                          {"lm_head", 768, 50304}};
  std::printf("threads %d\n%-10s %10s %10s %10s  %s\n", omp_get_max_threads(), "layer", "fwd GF/s", "dinp GF/s",
              "dW GF/s", "impl (fwd / dinp / dW)");
  struct Rates {
    double fwd, dinp, dw;
  };
  std::vector<Rates> fp32_rates;
  for (auto s : shapes) {
    std::vector<float> x(size_t(N) * s.C, 0.01f), w(size_t(s.OC) * s.C, 0.02f), b(s.OC, 0.f),
        y(size_t(N) * s.OC, 0.f), dw(w.size(), 0.f);
    double flops = 2.0 * N * s.C * s.OC;
    double f = gflops(flops, [&] { eng.gemm(y.data(), x.data(), w.data(), b.data(), N, s.OC, s.C, false, true, false); });
    double d = gflops(flops, [&] { eng.gemm(x.data(), y.data(), w.data(), nullptr, N, s.C, s.OC, false, false, false); });
    double g = gflops(flops, [&] { eng.gemm(dw.data(), y.data(), x.data(), nullptr, s.OC, s.C, N, true, false, true); });
    fp32_rates.push_back({f, d, g});
    std::printf("%-10s %10.1f %10.1f %10.1f  %s / %s / %s\n", s.name, f, d, g,
                eng.implementation(N, s.OC, s.C, false, true, true, false),
                eng.implementation(N, s.C, s.OC, false, false, false, false),
                eng.implementation(s.OC, s.C, N, true, false, false, true));
  }

  // bf16 inputs, fp32 outputs and accumulation: the mixed-precision layer.
  std::printf("\nbf16 x bf16 -> fp32 (x = bf16 rate / fp32 rate above)\n%-10s %16s %16s %16s  %s\n", "layer",
              "fwd GF/s", "dinp GF/s", "dW GF/s", "impl (fwd / dinp / dW)");
  for (size_t i = 0; i < std::size(shapes); i++) {
    const Shape s = shapes[i];
    const loom::bf16 small = loom::float_to_bf16(0.01f);
    std::vector<loom::bf16> x(size_t(N) * s.C, small), w(size_t(s.OC) * s.C, small), yh(size_t(N) * s.OC, small);
    std::vector<float> b(s.OC, 0.f), y(size_t(N) * s.OC), xg(size_t(N) * s.C), dw(w.size(), 0.f);
    double flops = 2.0 * N * s.C * s.OC;
    double f = gflops(flops, [&] { lowp.gemm(y.data(), x.data(), w.data(), b.data(), N, s.OC, s.C, false, true, false); });
    double d = gflops(flops, [&] { lowp.gemm(xg.data(), yh.data(), w.data(), nullptr, N, s.C, s.OC, false, false, false); });
    double g = gflops(flops, [&] { lowp.gemm(dw.data(), yh.data(), x.data(), nullptr, s.OC, s.C, N, true, false, true); });
    const Rates r = fp32_rates[i];
    std::printf("%-10s %9.1f (%.2fx) %9.1f (%.2fx) %9.1f (%.2fx)  %s / %s / %s\n", s.name, f, f / r.fwd, d,
                d / r.dinp, g, g / r.dw, lowp.implementation(N, s.OC, s.C, false, true, true, false).c_str(),
                lowp.implementation(N, s.C, s.OC, false, false, false, false).c_str(),
                lowp.implementation(s.OC, s.C, N, true, false, false, true).c_str());
  }

  // fp16: no fp16 products in oneDNN 2.6; the cost over fp32 is the widening.
  std::printf("\nfp16 (widened to fp32 in panels with F16C, then fp32)\n%-10s %16s\n", "layer", "fwd GF/s");
  for (size_t i = 0; i < std::size(shapes); i++) {
    const Shape s = shapes[i];
    const loom::f16 small = loom::float_to_f16(0.01f);
    std::vector<loom::f16> x(size_t(N) * s.C, small), w(size_t(s.OC) * s.C, small);
    std::vector<float> b(s.OC, 0.f), y(size_t(N) * s.OC);
    double f = gflops(2.0 * N * s.C * s.OC,
                      [&] { lowp.gemm(y.data(), x.data(), w.data(), b.data(), N, s.OC, s.C, false, true, false); });
    std::printf("%-10s %9.1f (%.2fx)\n", s.name, f, f / fp32_rates[i].fwd);
  }
}
