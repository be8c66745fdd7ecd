#include "checkpoint/tensor_piece.h"

#include <algorithm>

#include "core/check.h"
#include "core/dtype.h"

namespace loom {
namespace {

void check_place(const PiecePlace& p, const std::string& origin) {
  const char* o = origin.c_str();
  const char* n = p.name.c_str();
  LOOM_USER_CHECK(!p.name.empty() && p.name.find_first_of("@#") == std::string::npos,
                  "%s: tensor name '%s' is empty or holds '@' or '#'", o, n);
  LOOM_USER_CHECK(p.offset.size() == p.global_shape.size() && p.shape.size() == p.global_shape.size(),
                  "%s: piece of '%s' has offset %s and shape %s for a global shape %s", o, n,
                  dims_text(p.offset).c_str(), dims_text(p.shape).c_str(), dims_text(p.global_shape).c_str());
  // Bounded before any sum or product is formed (a file's figures could
  // otherwise overflow them): at most 8 dimensions of < 2^40, 2^48 elements.
  constexpr int64_t kMaxDim = int64_t(1) << 40, kMaxElements = int64_t(1) << 48;
  LOOM_USER_CHECK(p.global_shape.size() <= 8, "%s: piece of '%s' has %zu dimensions (at most 8)", o, n,
                  p.global_shape.size());
  int64_t elements = 1;
  for (size_t d = 0; d < p.global_shape.size(); d++) {
    LOOM_USER_CHECK(p.global_shape[d] < kMaxDim && p.offset[d] < kMaxDim && p.shape[d] < kMaxDim &&
                        (p.global_shape[d] <= 0 || elements <= kMaxElements / p.global_shape[d]),
                    "%s: tensor '%s' has global shape %s: too large (dimensions below 2^40, 2^48 elements)", o, n,
                    dims_text(p.global_shape).c_str());
    elements *= std::max<int64_t>(p.global_shape[d], 0);  // a negative one is named below
  }
  for (size_t d = 0; d < p.global_shape.size(); d++)
    LOOM_USER_CHECK(p.global_shape[d] >= 0 && p.offset[d] >= 0 && p.shape[d] >= 0 &&
                        p.offset[d] + p.shape[d] <= p.global_shape[d],
                    "%s: piece of '%s' at offset %s, shape %s lies outside the global shape %s", o, n,
                    dims_text(p.offset).c_str(), dims_text(p.shape).c_str(), dims_text(p.global_shape).c_str());
  LOOM_USER_CHECK(p.flat_begin >= 0 && p.flat_begin <= p.flat_end && p.flat_end <= shape_numel(p.shape),
                  "%s: piece of '%s' holds elements [%lld, %lld) of a box of %lld", o, n, (long long)p.flat_begin,
                  (long long)p.flat_end, (long long)shape_numel(p.shape));
}

std::vector<int64_t> int_list(const nlohmann::json& j, const char* field, const std::string& origin) {
  LOOM_USER_CHECK(j.contains(field) && j[field].is_array(), "%s: piece entry without a '%s' list", origin.c_str(), field);
  std::vector<int64_t> v;
  for (const auto& x : j[field]) {
    LOOM_USER_CHECK(x.is_number_integer(), "%s: piece entry '%s' holds a non-integer", origin.c_str(), field);
    v.push_back(x.get<int64_t>());
  }
  return v;
}

}  // namespace

std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += ']';
  return s;
}

bool PiecePlace::whole() const {
  for (size_t d = 0; d < shape.size(); d++)
    if (offset[d] != 0 || shape[d] != global_shape[d]) return false;
  return full_box();
}

bool PiecePlace::full_box() const { return flat_begin == 0 && flat_end == shape_numel(shape); }

bool PiecePlace::same_place(const PiecePlace& o) const {
  return name == o.name && offset == o.offset && shape == o.shape && flat_begin == o.flat_begin &&
         flat_end == o.flat_end;
}

PiecePlace place_of(const CheckpointPiece& p, const std::string& origin) {
  PiecePlace q;
  q.name = p.name;
  q.global_shape = p.global_shape;
  q.offset = p.offset.empty() ? std::vector<int64_t>(p.global_shape.size(), 0) : p.offset;
  q.shape = p.shape.empty() ? p.global_shape : p.shape;
  q.flat_begin = p.flat_begin;
  q.flat_end = p.flat_end < 0 ? shape_numel(q.shape) : p.flat_end;
  check_place(q, origin);
  return q;
}

std::string piece_key(const PiecePlace& p) {
  if (p.whole()) return p.name;
  std::string key = p.name + "@";
  for (size_t d = 0; d < p.offset.size(); d++) {
    if (d) key += ',';
    key += std::to_string(p.offset[d]);
  }
  if (!p.full_box()) key += strprintf("#%lld-%lld", (long long)p.flat_begin, (long long)p.flat_end);
  return key;
}

nlohmann::json place_to_json(const PiecePlace& p) {
  nlohmann::json j = {{"name", p.name}, {"global_shape", p.global_shape}, {"offset", p.offset}, {"shape", p.shape}};
  if (!p.full_box()) j["flat_range"] = {p.flat_begin, p.flat_end};
  return j;
}

PiecePlace place_from_json(const nlohmann::json& j, const std::string& origin) {
  LOOM_USER_CHECK(j.is_object() && j.contains("name") && j["name"].is_string(), "%s: piece entry without a name",
                  origin.c_str());
  PiecePlace p;
  p.name = j["name"].get<std::string>();
  p.global_shape = int_list(j, "global_shape", origin);
  p.offset = int_list(j, "offset", origin);
  p.shape = int_list(j, "shape", origin);
  if (j.contains("flat_range")) {
    std::vector<int64_t> r = int_list(j, "flat_range", origin);
    LOOM_USER_CHECK(r.size() == 2, "%s: piece of '%s': flat_range needs two numbers", origin.c_str(), p.name.c_str());
    p.flat_begin = r[0];
    p.flat_end = r[1];
  } else {
    p.flat_begin = 0;
    p.flat_end = shape_numel(p.shape);
  }
  check_place(p, origin);
  return p;
}

WrittenFile write_piece_file(const std::string& path, const std::vector<CheckpointPiece>& pieces,
                             std::map<std::string, std::string> metadata, const std::function<void()>& half_written) {
  std::vector<StEntry> entries;
  std::vector<std::vector<uint16_t>> narrowed;  // 16-bit copies, alive until written
  narrowed.reserve(pieces.size());
  nlohmann::json places = nlohmann::json::array();
  for (const auto& piece : pieces) {
    PiecePlace q = place_of(piece, strprintf("checkpoint file '%s'", path.c_str()));
    LOOM_USER_CHECK(piece.store != StDType::I32, "checkpoint file '%s': '%s' cannot be stored as I32", path.c_str(),
                    q.name.c_str());
    LOOM_CHECK(piece.data || q.count() == 0, "piece '%s' without data", q.name.c_str());
    StEntry e;
    e.name = piece_key(q);
    e.dtype = piece.store;
    // A full box keeps its shape (readable as is by other tools); a range is 1-D.
    e.shape = q.full_box() ? q.shape : std::vector<int64_t>{q.count()};
    e.data = piece.data;
    if (piece.store != StDType::F32) {
      std::vector<uint16_t>& out = narrowed.emplace_back(size_t(q.count()));
      if (piece.store == StDType::BF16)
        convert_f32_to_bf16(reinterpret_cast<bf16*>(out.data()), piece.data, out.size());
      else
        convert_f32_to_f16(reinterpret_cast<f16*>(out.data()), piece.data, out.size());
      e.data = out.data();
    }
    nlohmann::json j = place_to_json(q);
    j["key"] = e.name;
    places.push_back(std::move(j));
    entries.push_back(std::move(e));
  }
  metadata["loom.pieces"] = places.dump();
  return write_safetensors(path, entries, metadata, half_written);
}

std::vector<PiecePlace> pieces_in_file(const SafetensorsFile& file) {
  std::string origin = strprintf("checkpoint file '%s'", file.path().c_str());
  auto it = file.metadata().find("loom.pieces");
  LOOM_USER_CHECK(it != file.metadata().end(), "%s has no loom.pieces metadata (not a loom checkpoint file)",
                  origin.c_str());
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception&) {
    throw UserError(origin + ": loom.pieces metadata is not JSON");
  }
  LOOM_USER_CHECK(list.is_array(), "%s: loom.pieces metadata is not a list", origin.c_str());
  std::vector<PiecePlace> out;
  for (const auto& j : list) {
    PiecePlace p = place_from_json(j, origin);
    const std::string key = piece_key(p);
    LOOM_USER_CHECK(j.contains("key") && j["key"] == key, "%s: piece of '%s' is listed under the wrong key",
                    origin.c_str(), p.name.c_str());
    const StTensorInfo* t = file.find(key);
    LOOM_USER_CHECK(t && shape_numel(t->shape) == p.count(), "%s: tensor '%s' is missing or has the wrong size",
                    origin.c_str(), key.c_str());
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace loom
