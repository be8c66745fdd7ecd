// `loom info`: the CPU, the kernels chosen for it (kernels/cpu/isa.h) and
// the rates they reach here: the fp32 FMA peak and one layer-sized product in
// each precision, all measured now.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/commands.h"
#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_lowp.h"
#include "obs/peak_flops.h"

namespace loom::cli {

namespace {

float make(float x, float) { return x; }
bf16 make(float x, bf16) { return float_to_bf16(x); }
f16 make(float x, f16) { return float_to_f16(x); }

// GFLOP/s of out[N,OC] = inp[N,C] weight[OC,C]^T: the best of five timed
// repeats after a warm-up (the first call creates the primitives).
template <class T>
double layer_gflops(cpu::LowpMatmulEngine& eng, int N, int C, int OC) {
  std::vector<T> inp(size_t(N) * C), weight(size_t(OC) * C);
  for (size_t i = 0; i < inp.size(); i++) inp[i] = make(float(i % 7) * 0.1f, T{});
  for (size_t i = 0; i < weight.size(); i++) weight[i] = make(float(i % 5) * 0.1f, T{});
  std::vector<float> out(size_t(N) * OC);
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::matmul_forward(eng, out.data(), inp.data(), weight.data(), nullptr, N, C, OC);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && s < best) best = s;
  }
  return 2.0 * N * C * OC / best * 1e-9;
}

}  // namespace

int cmd_info(const Args& args) {
  int threads = 0;
  bool json_out = false;
  std::string isa = "auto";
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) {
      LOOM_USER_CHECK(i + 1 < args.size(), "info: %s needs a value", flag);
      return args[++i];
    };
    if (a == "--threads") {
      const std::string v = value("--threads");
      char* end = nullptr;
      threads = int(std::strtol(v.c_str(), &end, 10));
      LOOM_USER_CHECK(end && *end == 0 && threads >= 0 && threads <= 1024, "info: --threads must be in [0, 1024], got '%s'",
                      v.c_str());
    } else if (a == "--isa") {
      isa = value("--isa");
    } else if (a == "--json") {
      json_out = true;
    } else {
      throw UserError(strprintf("info: unknown option '%s' (try loom info --help)", a.c_str()));
    }
  }
  cpu::cap_isa(isa, "--isa");
  if (threads > 0) omp_set_num_threads(threads);
  threads = omp_get_max_threads();

  const cpu::Dispatch d = cpu::describe_dispatch();
  const double peak = measure_peak_gflops(threads, 0.2);
  // bf16 products run as vdpbf16ps where the CPU has them; widened to fp32 FMAs otherwise.
  const double bf16_peak = cpu::native_bf16_products() ? measure_bf16_peak_gflops(threads, 0.2) : 0;
  const int N = 1024, C = 768, OC = 768;
  double fp32 = 0, bf16_rate = 0, fp16_rate = 0;
  {
    cpu::LowpMatmulEngine eng;
    fp32 = layer_gflops<float>(eng, N, C, OC);
    bf16_rate = layer_gflops<bf16>(eng, N, C, OC);
    fp16_rate = layer_gflops<f16>(eng, N, C, OC);
  }
  if (json_out) {
    nlohmann::json j = {{"vendor", d.cpu.vendor},
                        {"model", d.cpu.model},
                        {"logical_cpus", d.cpu.logical_cpus},
                        {"flags", d.cpu.flags()},
                        {"highest_isa", isa_name(d.highest)},
                        {"isa", isa_name(d.in_use)},
                        {"fp32_gemm", d.fp32_gemm},
                        {"bf16_gemm", d.bf16_gemm},
                        {"bf16_attention", d.attention},
                        {"fp16_gemm", d.fp16_gemm},
                        {"threads", threads},
                        {"fp32_peak_gflops", peak},
                        {"bf16_peak_gflops", bf16_peak > 0 ? nlohmann::json(bf16_peak) : nlohmann::json(nullptr)},
                        {"layer_gflops", {{"shape", "1024x768x768"}, {"fp32", fp32}, {"bf16", bf16_rate}, {"fp16", fp16_rate}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s\n\n", d.line().c_str());
  std::printf("cpu            %s (%s), %d logical cpus\n", d.cpu.model.c_str(), d.cpu.vendor.c_str(), d.cpu.logical_cpus);
  std::printf("instructions   %s\n", d.cpu.flags().c_str());
  std::printf("isa            %s in use (the CPU's highest: %s; cap with runtime.isa or LOOM_MAX_CPU_ISA)\n",
              isa_name(d.in_use), isa_name(d.highest));
  std::printf("fp32 GEMM      %s\n", d.fp32_gemm.c_str());
  std::printf("bf16 GEMM      %s\n", d.bf16_gemm.c_str());
  std::printf("bf16 attention %s\n", d.attention.c_str());
  std::printf("fp16 GEMM      %s\n\n", d.fp16_gemm.c_str());
  std::printf("measured now with %d threads:\n", threads);
  std::printf("  fp32 FMA peak                 %8.1f GFLOP/s\n", peak);
  if (bf16_peak > 0) std::printf("  bf16 dot-product peak         %8.1f GFLOP/s (vdpbf16ps)\n", bf16_peak);
  else std::printf("  bf16 dot-product peak                  - (no avx512_bf16: bf16 products widen to fp32)\n");
  std::printf("  fp32 layer %dx%dx%d     %8.1f GFLOP/s (%.0f%% of peak)\n", N, C, OC, fp32, 100 * fp32 / peak);
  if (bf16_peak > 0)
    std::printf("  bf16 layer %dx%dx%d     %8.1f GFLOP/s (%.2fx fp32, %.0f%% of the bf16 peak)\n", N, C, OC, bf16_rate,
                bf16_rate / fp32, 100 * bf16_rate / bf16_peak);
  else
    std::printf("  bf16 layer %dx%dx%d     %8.1f GFLOP/s (%.2fx fp32)\n", N, C, OC, bf16_rate, bf16_rate / fp32);
  std::printf("  fp16 layer %dx%dx%d     %8.1f GFLOP/s (%.2fx fp32)\n", N, C, OC, fp16_rate, fp16_rate / fp32);
  return 0;
}

}  // namespace loom::cli
