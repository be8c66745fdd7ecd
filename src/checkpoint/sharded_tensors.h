// Global tensors assembled from the pieces that a set of rank files hold.
//
// This is how a run resumes with a different (dp, tp, pp, zero): each rank
// asks for the boxes its new layout owns, whatever boxes the writers owned.
// Pieces at the same place in several files (data-parallel replicas) are
// read once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/global_tensors.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_piece.h"

namespace loom {

class ShardedTensors : public GlobalTensors {
 public:
  // Opens (maps) each file and indexes its pieces. Throws UserError naming
  // the file on a malformed file, and naming both files when they disagree
  // on a tensor's global shape.
  explicit ShardedTensors(const std::vector<std::string>& paths);

  bool has(const std::string& name) const override { return index_.count(name) != 0; }
  std::vector<std::string> names() const;
  // Throws UserError if the tensor is absent.
  const std::vector<int64_t>& global_shape(const std::string& name) const override;

  // The box [offset, offset + shape) of global tensor `name`, row-major, into
  // out (shape_numel(shape) floats). Throws UserError naming the tensor and
  // the first element no piece holds, or a box outside the tensor.
  void read_region(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                   float* out) const override;
  using GlobalTensors::read_region;

  // Every element of every tensor is held by some piece; otherwise throws
  // UserError naming the tensor and its first element no piece holds.
  // Reads no tensor data (the pieces' places only).
  void check_complete() const;

 private:
  struct Located {
    PiecePlace place;
    int file;
    const StTensorInfo* entry;
  };
  struct Tensor {
    std::vector<int64_t> global_shape;
    int first_file;
    std::vector<Located> pieces;
  };
  const Tensor& tensor(const std::string& name) const;
  std::string where(const Tensor& t) const;

  std::vector<SafetensorsFile> files_;
  std::map<std::string, Tensor> index_;
};

}  // namespace loom
