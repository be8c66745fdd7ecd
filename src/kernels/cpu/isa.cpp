#include "kernels/cpu/isa.h"

#include <dnnl.hpp>

#include <cstdlib>

#include "core/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_lowp.h"

namespace loom::cpu {

namespace {

dnnl::cpu_isa to_dnnl(Isa isa) {
  switch (isa) {
    case Isa::avx2: return dnnl::cpu_isa::avx2;
    case Isa::avx512: return dnnl::cpu_isa::avx512_core;
    case Isa::avx512_bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case Isa::amx: return dnnl::cpu_isa::avx512_core_amx;
  }
  return dnnl::cpu_isa::all;
}

// oneDNN's ISA values are bit sets, each level containing the ones below.
bool has(dnnl::cpu_isa effective, dnnl::cpu_isa level) {
  const unsigned e = unsigned(effective), l = unsigned(level);
  return (e & l) == l;
}

Isa checked(std::string_view name, const std::string& where, Isa highest, const CpuInfo& cpu) {
  auto isa = parse_isa(name);
  LOOM_USER_CHECK(isa.has_value(), "%s: unknown instruction set '%.*s' (expected auto, %s)", where.c_str(),
                  int(name.size()), name.data(), isa_names());
  LOOM_USER_CHECK(*isa <= highest, "%s: '%s' is above what this CPU supports (%s: %s; up to %s)", where.c_str(),
                  isa_name(*isa), cpu.model.c_str(), cpu.flags().c_str(), isa_name(highest));
  return *isa;
}

}  // namespace

void cap_isa(std::optional<Isa> cap, const char* field) {
  const CpuInfo cpu = read_cpu_info();
  const Isa highest = highest_isa(cpu);
  if (cap) checked(isa_name(*cap), field, highest, cpu);
  if (const char* env = std::getenv("LOOM_MAX_CPU_ISA"); env && *env && std::string_view(env) != "auto") {
    const Isa from_env = checked(env, "LOOM_MAX_CPU_ISA (environment)", highest, cpu);
    cap = cap ? std::min(*cap, from_env) : from_env;
  }
  if (!cap) return;
  if (dnnl::set_max_cpu_isa(to_dnnl(*cap)) == dnnl::status::success) return;
  // oneDNN fixes its ISA at first use: only a repeat of that level is fine.
  LOOM_CHECK(kernel_isa() == *cap, "instruction-set cap %s set after oneDNN started at %s", isa_name(*cap),
             isa_name(kernel_isa()));
}

void cap_isa(const std::string& name, const char* field) {
  if (name == "auto" || name.empty()) return cap_isa(std::nullopt, field);
  const auto isa = parse_isa(name);
  LOOM_USER_CHECK(isa.has_value(), "%s: unknown instruction set '%s' (expected auto, %s)", field, name.c_str(),
                  isa_names());
  cap_isa(*isa, field);  // checks it against the CPU
}

Isa kernel_isa() {
  const dnnl::cpu_isa e = dnnl::get_effective_cpu_isa();
  if (has(e, dnnl::cpu_isa::avx512_core_amx)) return Isa::amx;
  if (has(e, dnnl::cpu_isa::avx512_core_bf16)) return Isa::avx512_bf16;
  if (has(e, dnnl::cpu_isa::avx512_core)) return Isa::avx512;
  return Isa::avx2;
}

Dispatch describe_dispatch() {
  Dispatch d;
  d.cpu = read_cpu_info();
  d.highest = highest_isa(d.cpu);
  d.in_use = kernel_isa();
  // A typical layer's product (128 tokens x 256 features) names the kernels.
  MatmulEngine f32;
  d.fp32_gemm = std::string("oneDNN ") + f32.implementation(128, 256, 256, false, true, true, false);
  const std::string why = d.highest < Isa::avx512_bf16 ? "no avx512_bf16" : "capped at " + std::string(isa_name(d.in_use));
  if (native_bf16_products()) {
    LowpMatmulEngine lowp;
    d.bf16_gemm = std::string("oneDNN ") + lowp.implementation(128, 256, 256, false, true, true, false);
    d.attention = "oneDNN gemm_bf16bf16f32";
  } else {
    d.bf16_gemm = "widened to fp32 in panels (" + why + ")";
    d.attention = "widened to fp32 per head (" + why + ")";
  }
  d.fp16_gemm = "widened to fp32 in panels (oneDNN 2.6 has no fp16 products)";
  return d;
}

std::string Dispatch::line() const {
  return strprintf("cpu: %s (%d cpus) %s | isa %s%s | fp32 GEMM: %s | bf16 GEMM: %s | fp16 GEMM: %s",
                   cpu.model.c_str(), cpu.logical_cpus, cpu.flags().c_str(), isa_name(in_use),
                   in_use < highest ? " (capped)" : "", fp32_gemm.c_str(), bf16_gemm.c_str(), fp16_gemm.c_str());
}

}  // namespace loom::cpu
