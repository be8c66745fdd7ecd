// What this CPU can do, read once from CPUID (and XGETBV: an instruction set
// counts only if the operating system saves its registers).
//
// Pure facts about the hardware; which implementation each op uses is chosen
// from them (and from a cap the user may set) in kernels/cpu/isa.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace loom {

struct CpuInfo {
  std::string vendor;  // "AuthenticAMD", "GenuineIntel", ...
  std::string model;   // the brand string, e.g. "AMD EPYC 7B13 64-Core Processor"
  int logical_cpus = 0;
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 products summed in fp32
  bool amx_bf16 = false;     // AMX tiles with bf16
  bool avx512_fp16 = false;  // fp16 arithmetic

  // "avx2 fma f16c avx512f ..." : the flags above that are set.
  std::string flags() const;
};

CpuInfo read_cpu_info();

// Instruction-set levels the kernels choose between, lowest first:
// avx2 (AVX2 + FMA + F16C: what loom needs), avx512 (F/BW/VL/DQ),
// avx512_bf16 (adds vdpbf16ps), amx (AMX-BF16 tiles).
enum class Isa { avx2 = 0, avx512 = 1, avx512_bf16 = 2, amx = 3 };

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);  // the names above
const char* isa_names();                              // "avx2, avx512, avx512_bf16, amx"

// The highest level `cpu` supports. UserError when it lacks AVX2, FMA or F16C.
Isa highest_isa(const CpuInfo& cpu);

}  // namespace loom
