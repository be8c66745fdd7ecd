// The safetensors file format, exactly as Hugging Face's library writes and
// reads it:
//
//   8 bytes   little-endian u64 N, the header's length
//   N bytes   JSON {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                   "__metadata__": {"key": "string value", ...}}   (padded with spaces to 8 bytes)
//   the data  every tensor row-major, little-endian, offsets relative to here;
//             the tensors tile the data with no gap and no overlap
//
// The reader checks all of that and names the file in every error (UserError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace loom {

enum class StDType : uint8_t { F32, BF16, F16, I32 };

size_t st_dtype_size(StDType t);
const char* st_dtype_name(StDType t);  // "F32", "BF16", "F16", "I32"
bool parse_st_dtype(const std::string& s, StDType* out);

int64_t shape_numel(const std::vector<int64_t>& shape);

struct StEntry {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // shape_numel(shape) elements of dtype
};

struct WrittenFile {
  uint64_t bytes = 0;
  std::string sha256;  // of the whole file, hashed while writing
};

// Writes atomically (temporary name, fsync, rename, fsync of the folder).
// Throws UserError naming `path` on a duplicate name or a failed write.
// `half_written`, if given, is called once when half the tensor data is
// written (fault injection: a crash in the middle of a checkpoint file).
WrittenFile write_safetensors(const std::string& path, const std::vector<StEntry>& entries,
                              const std::map<std::string, std::string>& metadata,
                              const std::function<void()>& half_written = {});

struct StTensorInfo {
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data
};

// A safetensors file mapped read-only.
class SafetensorsFile {
 public:
  // Throws UserError naming `path` if it is missing, truncated or malformed.
  static SafetensorsFile open(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr if absent.
  const StTensorInfo* find(const std::string& name) const;
  const uint8_t* raw(const StTensorInfo& t) const { return data_ + t.begin; }
  // Elements [first, first + n) of tensor `t` (row-major) converted to float;
  // an I32 tensor's values are converted too.
  void read_floats(const StTensorInfo& t, int64_t first, int64_t n, float* out) const;
  uint64_t file_bytes() const { return size_; }

 private:
  SafetensorsFile() = default;
  void unmap();
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace loom
