#include "checkpoint/layout_pieces.h"

#include <algorithm>

#include "checkpoint/sharded_tensors.h"
#include "core/check.h"

namespace loom {
namespace {

// Calls f(param, piece, lo, hi) for every rectangle of every tensor whose
// buffer range [start, start + numel) meets [begin, end), with [lo, hi) the
// overlap in rectangle-relative (row-major) positions.
template <class F>
void for_each_piece_in(const ParamLayout& layout, int64_t begin, int64_t end, F&& f) {
  if (end < 0) end = layout.total;
  LOOM_CHECK(0 <= begin && begin <= end && end <= layout.total, "range [%lld, %lld) outside a buffer of %lld",
             (long long)begin, (long long)end, (long long)layout.total);
  for (size_t i = 0; i < layout.params.size(); i++) {
    const ParamSpec& p = layout.params[i];
    if (p.offset >= end || p.offset + p.numel <= begin) continue;
    for (const TensorPiece& piece : layout.pieces(int(i))) {
      const int64_t start = p.offset + piece.local_offset, count = shape_numel(piece.shape);
      const int64_t lo = std::max(begin, start), hi = std::min(end, start + count);
      if (lo < hi) f(p, piece, lo - start, hi - start, lo - begin);
    }
  }
}

}  // namespace

std::vector<CheckpointPiece> layout_pieces(const ParamLayout& layout, const float* data,
                                           const std::string& name_prefix, int64_t begin, int64_t end, StDType store) {
  std::vector<CheckpointPiece> out;
  for_each_piece_in(layout, begin, end, [&](const ParamSpec& p, const TensorPiece& piece, int64_t lo, int64_t hi,
                                            int64_t at) {
    out.push_back({name_prefix + p.name, p.shape, piece.global_offset, piece.shape, lo, hi, data + at, store});
  });
  return out;
}

void fill_from_checkpoint(const GlobalTensors& tensors, const ParamLayout& layout, float* data,
                          const std::string& name_prefix, int64_t begin, int64_t end, bool absent_ok) {
  for_each_piece_in(layout, begin, end, [&](const ParamSpec& p, const TensorPiece& piece, int64_t lo, int64_t hi,
                                            int64_t at) {
    const std::string name = name_prefix + p.name;
    if (absent_ok && !tensors.has(name)) return;
    LOOM_USER_CHECK(tensors.global_shape(name) == p.shape, "checkpoint tensor '%s' does not have this model's shape",
                    name.c_str());
    if (lo == 0 && hi == shape_numel(piece.shape)) {
      tensors.read_region(name, piece.global_offset, piece.shape, data + at);
      return;
    }
    // A ZeRO shard cuts the rectangle: read it whole, keep the cut.
    std::vector<float> box = tensors.read_region(name, piece.global_offset, piece.shape);
    std::copy(box.begin() + lo, box.begin() + hi, data + at);
  });
}

}  // namespace loom
