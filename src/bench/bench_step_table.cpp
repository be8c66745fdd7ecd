#include "bench/bench_step_table.h"

#include <cstdio>

#include "cli/command_util.h"
#include "core/check.h"

namespace loom::cli {
namespace {

std::string num(const StepResult& r, const char* f, double v) {
  return r.ok && v >= 0 ? strprintf(f, v) : std::string("-");
}
// a / b as "1.23x", or "-" when either run is missing.
std::string ratio(const StepResult& a, const StepResult& b) {
  return a.ok && b.ok ? strprintf("%.2fx", a.tokens_per_s / b.tokens_per_s) : std::string("-");
}

void row(const PrecisionGroup& g, const char* engine, const char* prec, const StepResult& r, const std::string& x32,
         const std::string& vs_torch, const std::string& vs_best, const std::string& vs_compiled = "") {
  std::printf("%-10s %3d %5d | %-7s %4s | %10s %8s %8s | %7s | %8s %9s", g.shape.c_str(), g.threads, g.steps, engine,
              prec, num(r, "%.0f", r.tokens_per_s).c_str(), num(r, "%.0f", r.peak_rss_mb).c_str(),
              num(r, "%.0f", r.activation_mib).c_str(), x32.c_str(), vs_torch.c_str(), vs_best.c_str());
  if (g.compiled) std::printf(" %11s", vs_compiled.c_str());
  if (!r.torch_version.empty()) std::printf("  torch %s", r.torch_version.c_str());
  // Overflowing fp16 steps skip AdamW, which makes them a little cheaper.
  if (r.ok && r.skipped > 0) std::printf("  (%d of %d steps skipped: fp16 overflow)", r.skipped, g.steps);
  std::printf("\n");
}

}  // namespace

StepResult parse_step_result(const std::string& line) {
  StepResult r;
  r.tokens_per_s = json_number(line, "tokens_per_s");
  r.peak_rss_mb = json_number(line, "peak_rss_mb");
  r.activation_mib = json_number(line, "activation_mib");
  r.skipped = int(json_number(line, "skipped_steps"));
  r.ok = r.tokens_per_s > 0;
  // "torch": "2.7.1+cu126" (PyTorch rows only)
  const size_t key = line.find("\"torch\": \"");
  if (key != std::string::npos) {
    const size_t begin = key + 10, end = line.find('"', begin);
    if (end != std::string::npos) r.torch_version = line.substr(begin, end - begin);
  }
  return r;
}

void print_precision_header() {
  std::printf("bf16 / fp16: loom's matrix products and stored activations in 16 bits; master weights, "
              "gradients and AdamW fp32\n"
              "(fp16 with dynamic loss scaling). torch bf16 = torch.autocast(\"cpu\", bfloat16) around "
              "forward + loss;\ntorch.c = the same under torch.compile (--torch-compile). Each PyTorch row names "
              "the version that ran it (--torch PYTHON picks the interpreter).\n"
              "act MiB: loom's planned activation memory; x fp32: tokens/s against the same engine's fp32 "
              "(as the environment is);\n"
              "vs torch / vs torch* / vs torch.c: loom against PyTorch at the same precision (bf16: torch bf16 "
              "autocast)\n\n");
}

void print_precision_columns(bool compiled) {
  std::printf("%-10s %3s %5s | %-7s %4s | %10s %8s %8s | %7s | %8s %9s", "shape", "thr", "steps", "engine", "prec",
              "tok/s", "RSS MiB", "act MiB", "x fp32", "vs torch", "vs torch*");
  if (compiled) std::printf(" %11s", "vs torch.c");
  std::printf("\n");
}

void print_precision_group(const PrecisionGroup& g) {
  const StepResult* loom32 = nullptr;
  for (const auto& [p, r] : g.loom)
    if (p == ComputePrecision::fp32) loom32 = &r;
  for (const auto& [p, r] : g.loom) {
    std::string x32 = loom32 ? ratio(r, *loom32) : "-";
    std::string vs_torch = "-", vs_best = "-", vs_compiled = "-";
    if (p == ComputePrecision::fp32 && g.pytorch) vs_torch = ratio(r, g.torch), vs_best = ratio(r, g.torch_best);
    if (p == ComputePrecision::bf16 && g.autocast) vs_torch = ratio(r, g.torch_bf16);
    if (p == ComputePrecision::fp32 && g.compiled) vs_compiled = ratio(r, g.torch_compiled);
    if (p == ComputePrecision::bf16 && g.compiled && g.autocast) vs_compiled = ratio(r, g.torch_compiled_bf16);
    row(g, "loom", compute_precision_name(p), r, x32, vs_torch, vs_best, vs_compiled);
  }
  if (g.pytorch) {
    row(g, "torch", "fp32", g.torch, ratio(g.torch, g.torch), "", "");
    row(g, "torch*", "fp32", g.torch_best, "", "", "");
  }
  if (g.autocast) row(g, "torch", "bf16", g.torch_bf16, ratio(g.torch_bf16, g.torch), "", "");
  if (g.compiled) row(g, "torch.c", "fp32", g.torch_compiled, ratio(g.torch_compiled, g.torch), "", "");
  if (g.compiled && g.autocast)
    row(g, "torch.c", "bf16", g.torch_compiled_bf16, ratio(g.torch_compiled_bf16, g.torch), "", "");
  std::fflush(stdout);
}

}  // namespace loom::cli
