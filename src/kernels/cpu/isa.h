// Which instruction sets the CPU kernels use, chosen at run time.
//
// Levels, lowest first: avx2 (AVX2 + FMA + F16C: the baseline loom needs),
// avx512 (AVX-512 F/BW/VL/DQ), avx512_bf16 (adds vdpbf16ps), amx (AMX-BF16
// tiles). The level in force is oneDNN's effective ISA: the CPU's highest,
// lowered by a cap (runtime.isa in the config, or LOOM_MAX_CPU_ISA in the
// environment, in the spirit of oneDNN's ONEDNN_MAX_CPU_ISA). oneDNN's own
// kernels follow that cap, and so do loom's choices between its native and
// portable paths (e.g. bf16 products: native with avx512_bf16, else the
// operands are widened to fp32 panel by panel), so a capped run exercises
// the portable paths on any machine.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/cpu_info.h"

namespace loom::cpu {

using loom::Isa;
using loom::isa_name;
using loom::isa_names;
using loom::parse_isa;
using loom::highest_isa;

// Caps oneDNN and loom's kernels at the lower of `cap` and LOOM_MAX_CPU_ISA
// (either may be absent). `field` names where `cap` came from, for messages.
// UserError (naming the field or variable and what the CPU supports) for an
// unknown name or a level above the CPU's. Call before the first oneDNN
// primitive is made; a later call may only repeat the level in force.
void cap_isa(std::optional<Isa> cap, const char* field = "runtime.isa");
// cap_isa for a name from the config ("auto" = no cap).
void cap_isa(const std::string& name, const char* field);

// The level the kernels use now.
Isa kernel_isa();
// bf16 x bf16 products run natively (oneDNN with avx512_bf16 or AMX);
// otherwise loom widens bf16 operands to fp32.
inline bool native_bf16_products() { return kernel_isa() >= Isa::avx512_bf16; }

// What was found and chosen, for the start-up log, `loom info` and reports.
struct Dispatch {
  CpuInfo cpu;
  Isa highest = Isa::avx2, in_use = Isa::avx2;
  std::string fp32_gemm;   // e.g. "oneDNN brg:avx2"
  std::string bf16_gemm;   // e.g. "oneDNN brg:avx512_core_bf16" or "widened to fp32 (no avx512_bf16)"
  std::string fp16_gemm;
  std::string attention;   // bf16 attention products
  // "cpu: AMD EPYC 7B13 (2 cpus) avx2 fma f16c | isa avx2 | fp32 GEMM: ... | bf16 GEMM: ... | fp16 GEMM: ..."
  std::string line() const;
};
Dispatch describe_dispatch();

}  // namespace loom::cpu
