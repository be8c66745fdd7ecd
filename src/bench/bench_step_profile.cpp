#include "bench/bench_step_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "obs/peak_flops.h"

namespace loom::cli {
namespace {

// The limit an op's rate is judged against, in its unit (GFLOP/s or GB/s).
double limit_of(OpLimit l, const MachineLimits& m) {
  switch (l) {
    case OpLimit::fp32_flops: return m.fp32_gflops;
    case OpLimit::lowp_flops: return m.bf16_gflops > 0 ? m.bf16_gflops : m.fp32_gflops;  // widened: fp32 FMAs
    case OpLimit::memory: return m.memory_gbps;
  }
  return 0;
}

// "rate unit (x% of limit)" for one row; "-" where the op's work is not counted.
std::string rate_text(const OpTotals& t, const MachineLimits& m) {
  const bool flops = t.limit != OpLimit::memory;
  const double work = flops ? t.flops : t.bytes;
  if (work <= 0 || t.seconds <= 0) return "-";
  const double rate = work / t.seconds * 1e-9;
  const double limit = limit_of(t.limit, m);
  return strprintf("%7.1f %-6s %5.0f%%", rate, flops ? "GFLOP/s" : "GB/s", limit > 0 ? 100 * rate / limit : 0.0);
}

void print_row(const std::string& name, const OpTotals& t, int steps, double step_s, const MachineLimits& m) {
  std::printf("  %-44s %7.1f %6.1f%% %7.1f  %s\n", name.c_str(), 1e3 * t.seconds / steps,
              100 * t.seconds / steps / step_s, double(t.calls) / steps, rate_text(t, m).c_str());
}

}  // namespace

MachineLimits measure_machine_limits(int threads) {
  MachineLimits m;
  m.fp32_gflops = measure_peak_gflops(threads, 0.2);
  if (cpu::native_bf16_products()) m.bf16_gflops = measure_bf16_peak_gflops(threads, 0.2);
  m.memory_gbps = measure_memory_gbps(threads);
  return m;
}

void print_step_profile(const KernelProfile& profile, int steps, double step_s, double tokens_per_step,
                        double flops_per_token, ComputePrecision precision, const MachineLimits& m) {
  std::printf("limits (measured now): fp32 FMA peak %.1f GFLOP/s; bf16 dot-product peak %s; memory %.1f GB/s "
              "(copy, read + write)\n",
              m.fp32_gflops,
              m.bf16_gflops > 0 ? strprintf("%.1f GFLOP/s (vdpbf16ps)", m.bf16_gflops).c_str()
                                : "- (bf16 products widen to fp32: judged against the fp32 peak)",
              m.memory_gbps);
  std::printf("step: %.1f ms, the mean of %d steps (%.0f tok/s), %s; each op's time is its wall time on the calling "
              "thread, its limit the FLOP peak of its precision (products) or memory bandwidth (the rest; above 100%%: in "
              "cache)\n",
              1e3 * step_s, steps, tokens_per_step / step_s, compute_precision_name(precision));
  // The step against its precision's peak, as the model counts its FLOPs.
  const double model_gflops = flops_per_token * tokens_per_step / step_s * 1e-9;
  const bool lowp = precision != ComputePrecision::fp32;
  const double peak = limit_of(lowp ? OpLimit::lowp_flops : OpLimit::fp32_flops, m);
  std::printf("model FLOPs (6N + 12·L·C·T a token): %.1f GFLOP/s = %.0f%% of the %s peak%s\n\n", model_gflops,
              100 * model_gflops / peak, lowp && m.bf16_gflops > 0 ? "bf16 dot-product" : "fp32 FMA",
              lowp && m.bf16_gflops > 0 ? strprintf(" (%.0f%% of the fp32 peak)", 100 * model_gflops / m.fp32_gflops).c_str()
                                        : "");
  // By kind, largest first.
  std::map<std::string, OpTotals> kinds;
  double counted = 0;
  for (const auto& [name, t] : profile.rows()) {
    OpTotals& k = kinds[t.kind];
    k.kind = t.kind, k.limit = t.limit;
    k.seconds += t.seconds, k.flops += t.flops, k.bytes += t.bytes, k.calls += t.calls;
    counted += t.seconds;
  }
  auto by_time = [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; };
  std::vector<std::pair<std::string, OpTotals>> sorted(kinds.begin(), kinds.end());
  std::sort(sorted.begin(), sorted.end(), by_time);
  std::printf("  %-44s %7s %7s %7s  %s\n", "op kind", "ms/step", "step", "calls", "rate and share of its limit");
  for (const auto& [name, t] : sorted) print_row(name, t, steps, step_s, m);
  OpTotals rest;
  rest.seconds = std::max(0.0, step_s * steps - counted);
  std::printf("  %-44s %7.1f %6.1f%%          (loops in the model and optimizer code, zeroing, copies)\n",
              "outside the backend's ops", 1e3 * rest.seconds / steps, 100 * rest.seconds / steps / step_s);
  // The largest shapes.
  std::vector<std::pair<std::string, OpTotals>> rows(profile.rows().begin(), profile.rows().end());
  std::sort(rows.begin(), rows.end(), by_time);
  std::printf("\n  %-44s %7s %7s %7s  %s\n", "largest ops by shape", "ms/step", "step", "calls", "rate and share of its limit");
  for (size_t i = 0; i < rows.size() && i < 16; i++) print_row(rows[i].first, rows[i].second, steps, step_s, m);
  std::fflush(stdout);
}

}  // namespace loom::cli
