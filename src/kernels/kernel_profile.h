// Where a step's kernel time goes (`loom bench step --profile`): every
// backend call made outside a parallel region adds its wall time, FLOPs and
// bytes moved to the row of its op and shape. Off (no profile given to the
// backend) it costs one branch per call.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include <omp.h>

namespace loom {

// What bounds an op: the FLOP peak of its precision, or memory bandwidth.
enum class OpLimit { fp32_flops, lowp_flops, memory };

struct OpTotals {
  std::string kind;  // e.g. "matmul fwd", "layernorm bwd", "adamw"
  OpLimit limit = OpLimit::memory;
  double seconds = 0, flops = 0, bytes = 0;
  long long calls = 0;
};

class KernelProfile {
 public:
  // Rows by name (kind and shape), e.g. "matmul fwd bf16 1024x768 -> 2304".
  void add(const std::string& name, const char* kind, OpLimit limit, double seconds, double flops, double bytes);
  const std::map<std::string, OpTotals>& rows() const { return rows_; }
  void clear() { rows_.clear(); }

 private:
  std::map<std::string, OpTotals> rows_;
};

// Times one backend call. The row's name is made only when profiling (and
// only outside a parallel region: a call from inside one is part of its
// caller's time).
class ProfileScope {
 public:
  template <class NameFn>
  ProfileScope(KernelProfile* profile, const char* kind, OpLimit limit, double flops, double bytes, NameFn&& name)
      : profile_(profile && !omp_in_parallel() ? profile : nullptr) {
    if (!profile_) return;
    kind_ = kind, limit_ = limit, flops_ = flops, bytes_ = bytes, name_ = name();
    start_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (profile_)
      profile_->add(name_, kind_, limit_,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), flops_, bytes_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  KernelProfile* profile_;
  const char* kind_ = "";
  OpLimit limit_ = OpLimit::memory;
  double flops_ = 0, bytes_ = 0;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

// "fp32", "bf16" or "f16" for a storage type.
template <class T>
const char* type_name();

}  // namespace loom
