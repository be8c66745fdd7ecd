// Global tensors by name, as a layout reads its pieces of them: a loom
// checkpoint of any layout (ShardedTensors) or a Hugging Face checkpoint
// seen through a family's name table (HfCheckpoint). A rank reads only the
// boxes its layout holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

class GlobalTensors {
 public:
  virtual ~GlobalTensors() = default;
  virtual bool has(const std::string& name) const = 0;
  // Throws UserError naming the tensor and the source if it is absent.
  virtual const std::vector<int64_t>& global_shape(const std::string& name) const = 0;
  // The box [offset, offset + shape) of `name`, row-major, into out
  // (shape_numel(shape) floats). Throws UserError naming what is missing.
  virtual void read_region(const std::string& name, const std::vector<int64_t>& offset,
                           const std::vector<int64_t>& shape, float* out) const = 0;
  // The same box as a new vector.
  std::vector<float> read_region(const std::string& name, const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& shape) const;
  std::vector<float> read_global(const std::string& name) const;
};

}  // namespace loom
