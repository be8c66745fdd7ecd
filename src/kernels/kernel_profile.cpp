#include "kernels/kernel_profile.h"

#include "core/dtype.h"

namespace loom {

void KernelProfile::add(const std::string& name, const char* kind, OpLimit limit, double seconds, double flops,
                        double bytes) {
  OpTotals& t = rows_[name];
  t.kind = kind, t.limit = limit;
  t.seconds += seconds, t.flops += flops, t.bytes += bytes, t.calls++;
}

template <>
const char* type_name<float>() { return "fp32"; }
template <>
const char* type_name<bf16>() { return "bf16"; }
template <>
const char* type_name<f16>() { return "f16"; }

}  // namespace loom
