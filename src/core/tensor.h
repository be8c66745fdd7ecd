// TensorView: a non-owning view of a contiguous, row-major tensor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace loom {

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  TensorView() = default;
  TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> dims) : data(data_), dtype(dtype_) {
    LOOM_CHECK(dims.size() <= kMaxDims, "too many dims: %zu", dims.size());
    for (int64_t d : dims) shape[ndim++] = d;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }

  float* f32() const {
    LOOM_CHECK(dtype == DType::f32, "tensor is %s, not fp32", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  std::string shape_string() const {
    std::string s = "[";
    for (int i = 0; i < ndim; i++) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace loom
