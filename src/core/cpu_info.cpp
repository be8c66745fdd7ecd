#include "core/cpu_info.h"

#include "core/check.h"

#include <cpuid.h>

#include <cstdint>
#include <cstring>
#include <thread>

namespace loom {

namespace {

struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.a, r.b, r.c, r.d);
  return r;
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

std::string trim(std::string s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(' ');
  return s.substr(b, e - b + 1);
}

constexpr const char* kIsaNames[] = {"avx2", "avx512", "avx512_bf16", "amx"};

}  // namespace

CpuInfo read_cpu_info() {
  CpuInfo info;
  info.logical_cpus = int(std::thread::hardware_concurrency());
  const Regs v = cpuid(0);
  char vendor[13] = {0};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  info.vendor = vendor;

  const uint32_t max_ext = cpuid(0x80000000).a;
  if (max_ext >= 0x80000004) {
    char brand[49] = {0};
    for (uint32_t i = 0; i < 3; i++) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    info.model = trim(brand);
  }
  if (info.model.empty()) info.model = info.vendor;

  const uint32_t max_leaf = v.a;
  if (max_leaf < 1) return info;
  const Regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;        // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;   // and opmask, ZMM halves
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // tile config and data
  info.fma = os_avx && bit(l1.c, 12);
  info.f16c = os_avx && bit(l1.c, 29);
  if (max_leaf < 7) return info;
  const Regs l7 = cpuid(7, 0);
  info.avx2 = os_avx && bit(l7.b, 5);
  info.avx512f = os_avx512 && bit(l7.b, 16);
  info.avx512dq = info.avx512f && bit(l7.b, 17);
  info.avx512bw = info.avx512f && bit(l7.b, 30);
  info.avx512vl = info.avx512f && bit(l7.b, 31);
  info.avx512_fp16 = info.avx512f && bit(l7.d, 23);
  info.amx_bf16 = os_amx && bit(l7.d, 22);
  if (l7.a >= 1) info.avx512_bf16 = info.avx512f && bit(cpuid(7, 1).a, 5);
  return info;
}

std::string CpuInfo::flags() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  add(avx512_fp16, "avx512_fp16");
  return s.empty() ? "no avx2" : s;
}

const char* isa_name(Isa isa) { return kIsaNames[int(isa)]; }

const char* isa_names() { return "avx2, avx512, avx512_bf16, amx"; }

std::optional<Isa> parse_isa(std::string_view name) {
  for (int i = 0; i < 4; i++)
    if (name == kIsaNames[i]) return Isa(i);
  return std::nullopt;
}

Isa highest_isa(const CpuInfo& cpu) {
  LOOM_USER_CHECK(cpu.avx2 && cpu.fma && cpu.f16c, "loom needs a CPU with AVX2, FMA and F16C; this one (%s) has: %s",
                  cpu.model.c_str(), cpu.flags().c_str());
  const bool avx512 = cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  if (avx512 && cpu.avx512_bf16 && cpu.amx_bf16) return Isa::amx;
  if (avx512 && cpu.avx512_bf16) return Isa::avx512_bf16;
  if (avx512) return Isa::avx512;
  return Isa::avx2;
}

}  // namespace loom
