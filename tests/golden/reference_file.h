#pragma once
// Reader for the golden reference files written by tools/make_reference.py.
//
// Format (little-endian), version 1:
//   magic    8 bytes "LOOMREF\0"
//   version  uint32
//   ints     uint32 count, then {uint32 name_len, name, int64 value}
//   floats   uint32 count, then {uint32 name_len, name, float64 value}
//   tensors  uint32 count, then {uint32 name_len, name, uint8 dtype
//            (0 = float32, 1 = int32), uint32 ndim, int64 dims[ndim],
//            raw row-major data}

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::test {

struct ReferenceFile {
  static constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'R', 'E', 'F', '\0'};
  static constexpr uint32_t kVersion = 1;

  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;

  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> f32;    // filled when the record is float32
    std::vector<int32_t> i32;  // filled when the record is int32

    int64_t numel() const {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      return n;
    }
  };
  std::map<std::string, Tensor> tensors;

  // Reads the whole file. Throws std::runtime_error naming the file and the
  // problem (cannot open, bad magic, unsupported version, truncated, ...).
  static ReferenceFile load(const std::string& path);

  // Looks up a tensor; throws std::runtime_error if it is missing.
  const Tensor& tensor(const std::string& name) const;
};

// The reference file `name` the build made (LOOM_BINARY_DIR/reference/<name>.ref),
// loaded once.
const ReferenceFile& built_reference(const std::string& name);

// The reference's values of loom tensor `name` under `prefix` ("param/",
// "grad/", "final/"): LLaMA's fused q/k/v and gate/up tensors are the
// row-wise stack of Hugging Face's parts, as loom fuses them.
std::vector<float> loom_tensor_values(const ReferenceFile& ref, const std::string& prefix, const std::string& name);

// ||got - want|| / ||want|| (Frobenius; got holds want.size() values).
inline double rel_frobenius(const float* got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); i++) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Parameters after AdamW steps against the reference's. The first step
// moves each element by lr * g / (|g| + eps): where the first gradient is
// rounding noise (|g| < 10 eps, as when a sum cancels to 1e-9 beside a
// tensor whose gradients are 1e-4), two correct engines move it by different
// fractions of lr (measured: 2.4e-9 here, 1.9e-9 in PyTorch on OpenBLAS's
// Zen kernels, 3e-5 apart after the step, the whole tensor's rel. error
// 1.3e-5). Those elements must be rare and within lr of the reference; the
// rest meet the tensor-wise bound (`rel`).
struct AdamWAgreement {
  double rel = 0;       // ||got - want|| / ||want|| over the other elements
  size_t noisy = 0;     // elements whose first gradient was noise
  double noisy_max = 0; // their largest |got - want|
};
inline AdamWAgreement adamw_agreement(const float* got, const std::vector<float>& want,
                                      const std::vector<float>& first_grad, double eps) {
  AdamWAgreement a;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); i++) {
    const double d = double(got[i]) - want[i];
    if (first_grad[i] != 0 && std::abs(first_grad[i]) < 10 * eps) {  // an exact 0 is no noise
      a.noisy++, a.noisy_max = std::max(a.noisy_max, std::abs(d));
      continue;
    }
    diff += d * d, norm += double(want[i]) * want[i];
  }
  a.rel = std::sqrt(diff / std::max(norm, 1e-30));
  return a;
}

}  // namespace loom::test
