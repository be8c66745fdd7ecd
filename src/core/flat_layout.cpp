#include "core/flat_layout.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

std::vector<FlatPiece> pieces_of(const FlatLayout& layout, const std::vector<FlatRange>& owned) {
  std::vector<FlatPiece> pieces;
  int64_t packed = 0;
  size_t t = 0;  // tensors and ranges both ascend: one merge pass
  for (size_t r = 0; r < owned.size(); r++) {
    const FlatRange& range = owned[r];
    LOOM_CHECK(range.begin <= range.end && (r == 0 || owned[r - 1].end <= range.begin),
               "owned ranges must be sorted and disjoint");
    while (t < layout.tensors.size() && layout.tensors[t].offset + layout.tensors[t].numel <= range.begin) t++;
    for (size_t u = t; u < layout.tensors.size() && layout.tensors[u].offset < range.end; u++) {
      const FlatTensor& x = layout.tensors[u];
      int64_t begin = std::max(x.offset, range.begin), end = std::min(x.offset + x.numel, range.end);
      if (begin < end) pieces.push_back({int(u), begin, packed + (begin - range.begin), end - begin});
    }
    packed += range.size();
  }
  return pieces;
}

int64_t total_size(const std::vector<FlatRange>& ranges) {
  int64_t n = 0;
  for (const auto& r : ranges) n += r.size();
  return n;
}

}  // namespace loom
