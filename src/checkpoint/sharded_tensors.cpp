#include "checkpoint/sharded_tensors.h"

#include <algorithm>

#include "core/check.h"

namespace loom {
namespace {

// A 0-d tensor is treated as [1] so that every box has a last dimension.
std::vector<int64_t> at_least_1d(std::vector<int64_t> v, int64_t fill) {
  if (v.empty()) v.push_back(fill);
  return v;
}

}  // namespace

ShardedTensors::ShardedTensors(const std::vector<std::string>& paths) {
  for (const auto& path : paths) files_.push_back(SafetensorsFile::open(path));
  for (int f = 0; f < int(files_.size()); f++) {
    for (PiecePlace& p : pieces_in_file(files_[f])) {
      auto [it, fresh] = index_.try_emplace(p.name, Tensor{p.global_shape, f, {}});
      Tensor& t = it->second;
      LOOM_USER_CHECK(t.global_shape == p.global_shape,
                      "checkpoint tensor '%s' has global shape %s in '%s' but %s in '%s'", p.name.c_str(),
                      dims_text(t.global_shape).c_str(), files_[t.first_file].path().c_str(),
                      dims_text(p.global_shape).c_str(), files_[f].path().c_str());
      bool replica = std::any_of(t.pieces.begin(), t.pieces.end(),
                                 [&](const Located& l) { return l.place.same_place(p); });
      if (replica) continue;
      const StTensorInfo* entry = files_[f].find(piece_key(p));
      t.pieces.push_back(Located{std::move(p), f, entry});
    }
  }
}

std::vector<std::string> ShardedTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

const ShardedTensors::Tensor& ShardedTensors::tensor(const std::string& name) const {
  auto it = index_.find(name);
  LOOM_USER_CHECK(it != index_.end(), "checkpoint has no tensor '%s' (in %zu file%s, first '%s')", name.c_str(),
                  files_.size(), files_.size() == 1 ? "" : "s", files_.empty() ? "-" : files_[0].path().c_str());
  return it->second;
}

const std::vector<int64_t>& ShardedTensors::global_shape(const std::string& name) const {
  return tensor(name).global_shape;
}

std::string ShardedTensors::where(const Tensor& t) const {
  std::string s;
  for (const auto& l : t.pieces) {
    const std::string& p = files_[l.file].path();
    if (s.find(p) != std::string::npos) continue;
    s += s.empty() ? "'" : ", '";
    s += p;
    s += '\'';
  }
  return s.empty() ? "no file" : s;
}

void ShardedTensors::read_region(const std::string& name, const std::vector<int64_t>& offset_in,
                                 const std::vector<int64_t>& shape_in, float* out) const {
  const Tensor& t = tensor(name);
  const size_t nd = t.global_shape.size();
  LOOM_USER_CHECK(offset_in.size() == nd && shape_in.size() == nd,
                  "checkpoint tensor '%s' has %zu dimensions; asked for offset %s shape %s", name.c_str(), nd,
                  dims_text(offset_in).c_str(), dims_text(shape_in).c_str());
  for (size_t d = 0; d < nd; d++)
    LOOM_USER_CHECK(offset_in[d] >= 0 && shape_in[d] >= 0 && offset_in[d] + shape_in[d] <= t.global_shape[d],
                    "checkpoint tensor '%s' (global shape %s): box at %s of shape %s lies outside it", name.c_str(),
                    dims_text(t.global_shape).c_str(), dims_text(offset_in).c_str(), dims_text(shape_in).c_str());
  const std::vector<int64_t> roff = at_least_1d(offset_in, 0), rshape = at_least_1d(shape_in, 1);
  const size_t n = rshape.size(), last = n - 1;
  const int64_t total = shape_numel(rshape);
  if (total == 0) return;
  std::vector<std::pair<int64_t, int64_t>> filled;  // [begin, end) of `out`, checked for gaps at the end

  for (const Located& piece : t.pieces) {
    const std::vector<int64_t> poff = at_least_1d(piece.place.offset, 0), pshape = at_least_1d(piece.place.shape, 1);
    // The intersection of the requested box and the piece's box, global coordinates.
    std::vector<int64_t> lo(n), hi(n);
    bool empty = false;
    for (size_t d = 0; d < n; d++) {
      lo[d] = std::max(roff[d], poff[d]);
      hi[d] = std::min(roff[d] + rshape[d], poff[d] + pshape[d]);
      empty |= lo[d] >= hi[d];
    }
    if (empty) continue;
    const int64_t width = pshape[last];
    const SafetensorsFile& file = files_[piece.file];
    // Walk the rows (all dimensions but the last) of the intersection.
    std::vector<int64_t> row(lo.begin(), lo.end() - 1);
    for (;;) {
      int64_t prow = 0, rrow = 0;  // row-major row index in the piece's box and in the request
      for (size_t d = 0; d < last; d++) {
        prow = prow * pshape[d] + (row[d] - poff[d]);
        rrow = rrow * rshape[d] + (row[d] - roff[d]);
      }
      // Columns of this row, in the piece's coordinates, clipped to what it stores.
      int64_t c0 = std::max(lo[last] - poff[last], piece.place.flat_begin - prow * width);
      int64_t c1 = std::min(hi[last] - poff[last], piece.place.flat_end - prow * width);
      if (c0 < c1) {
        int64_t dst = rrow * rshape[last] + (c0 + poff[last] - roff[last]);
        file.read_floats(*piece.entry, prow * width + c0 - piece.place.flat_begin, c1 - c0, out + dst);
        if (!filled.empty() && filled.back().second == dst) filled.back().second = dst + (c1 - c0);
        else filled.push_back({dst, dst + (c1 - c0)});
      }
      size_t d = last;  // next row: odometer over dimensions [0, last)
      while (d > 0 && ++row[d - 1] == hi[d - 1]) row[d - 1] = lo[d - 1], d--;
      if (d == 0) break;
    }
  }
  std::sort(filled.begin(), filled.end());
  int64_t missing = 0;
  for (const auto& [b, e] : filled) {
    if (b > missing) break;
    missing = std::max(missing, e);
  }
  if (missing >= total) return;
  std::vector<int64_t> at(n);
  for (size_t d = n; d-- > 0;) at[d] = roff[d] + missing % rshape[d], missing /= rshape[d];
  throw UserError(strprintf("checkpoint tensor '%s' (global shape %s): no piece holds element %s (pieces in %s)",
                            name.c_str(), dims_text(t.global_shape).c_str(), dims_text(at).c_str(),
                            where(t).c_str()));
}

std::vector<float> GlobalTensors::read_region(const std::string& name, const std::vector<int64_t>& offset,
                                              const std::vector<int64_t>& shape) const {
  std::vector<float> out(size_t(shape_numel(shape)));
  read_region(name, offset, shape, out.data());
  return out;
}

std::vector<float> GlobalTensors::read_global(const std::string& name) const {
  const std::vector<int64_t>& g = global_shape(name);
  return read_region(name, std::vector<int64_t>(g.size(), 0), g);
}

void ShardedTensors::check_complete() const {
  for (const auto& [name, t] : index_) {
    // Each row of each piece is an interval of the global row-major order;
    // sort and sweep them for the first element none covers.
    std::vector<std::pair<int64_t, int64_t>> spans;
    const std::vector<int64_t> g = at_least_1d(t.global_shape, 1);
    const size_t n = g.size(), last = n - 1;
    for (const Located& piece : t.pieces) {
      const std::vector<int64_t> poff = at_least_1d(piece.place.offset, 0), pshape = at_least_1d(piece.place.shape, 1);
      const int64_t width = pshape[last], rows = shape_numel(pshape) / std::max<int64_t>(width, 1);
      if (width == 0) continue;
      for (int64_t prow = piece.place.flat_begin / width; prow * width < piece.place.flat_end && prow < rows; prow++) {
        int64_t c0 = std::max<int64_t>(0, piece.place.flat_begin - prow * width);
        int64_t c1 = std::min<int64_t>(width, piece.place.flat_end - prow * width);
        int64_t grow = 0, rest = prow;  // the row's index in the global tensor
        std::vector<int64_t> idx(last);
        for (size_t d = last; d-- > 0;) idx[d] = rest % pshape[d], rest /= pshape[d];
        for (size_t d = 0; d < last; d++) grow = grow * g[d] + poff[d] + idx[d];
        int64_t begin = grow * g[last] + poff[last] + c0, end = begin + (c1 - c0);
        if (!spans.empty() && spans.back().second == begin) spans.back().second = end;
        else spans.push_back({begin, end});
      }
    }
    std::sort(spans.begin(), spans.end());
    int64_t reach = 0;
    for (const auto& [b, e] : spans) {
      if (b > reach) break;
      reach = std::max(reach, e);
    }
    int64_t total = shape_numel(g);
    if (reach >= total) continue;
    std::vector<int64_t> at(n);
    for (size_t d = n; d-- > 0;) at[d] = reach % g[d], reach /= g[d];
    throw UserError(strprintf("checkpoint tensor '%s' (global shape %s): no piece holds element %s (pieces in %s)",
                              name.c_str(), dims_text(t.global_shape).c_str(), dims_text(at).c_str(),
                              where(t).c_str()));
  }
}

}  // namespace loom
