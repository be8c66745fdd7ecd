#include "checkpoint/tensor_index.h"

#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_piece.h"
#include "core/check.h"

namespace loom {
namespace {

std::string short_json(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

}  // namespace

nlohmann::json tensor_index(const std::string& dir, const std::vector<FileRecord>& files) {
  nlohmann::json index = nlohmann::json::object();
  for (const auto& f : files) {
    SafetensorsFile file = SafetensorsFile::open(dir + "/" + f.name);
    for (const PiecePlace& p : pieces_in_file(file)) {
      nlohmann::json& t = index[p.name];
      if (t.is_null()) t = {{"global_shape", p.global_shape}, {"pieces", nlohmann::json::array()}};
      nlohmann::json j = place_to_json(p);
      j.erase("name");
      j.erase("global_shape");
      j["file"] = f.name;
      j["key"] = piece_key(p);
      t["pieces"].push_back(std::move(j));
    }
  }
  return index;
}

void check_tensor_index(const nlohmann::json& recorded, const nlohmann::json& actual,
                        const std::string& manifest_path) {
  const char* path = manifest_path.c_str();
  LOOM_USER_CHECK(recorded.is_object(), "checkpoint manifest '%s': field 'tensors' must be an object, not %s", path,
                  short_json(recorded).c_str());
  for (const auto& [name, t] : recorded.items())
    LOOM_USER_CHECK(actual.contains(name), "checkpoint manifest '%s' lists tensor '%s', which no rank file holds", path,
                    name.c_str());
  for (const auto& [name, want] : actual.items()) {
    LOOM_USER_CHECK(recorded.contains(name), "checkpoint manifest '%s' does not list tensor '%s', which %s holds", path,
                    name.c_str(), want["pieces"][0]["file"].get<std::string>().c_str());
    const nlohmann::json& got = recorded[name];
    LOOM_USER_CHECK(got.is_object() && got.contains("global_shape") && got.contains("pieces") &&
                        got["pieces"].is_array(),
                    "checkpoint manifest '%s': tensor '%s' needs 'global_shape' and a list of 'pieces', not %s", path,
                    name.c_str(), short_json(got).c_str());
    LOOM_USER_CHECK(got["global_shape"] == want["global_shape"],
                    "checkpoint manifest '%s': tensor '%s' has global shape %s there, %s in its rank files", path,
                    name.c_str(), short_json(got["global_shape"]).c_str(), short_json(want["global_shape"]).c_str());
    const nlohmann::json &gp = got["pieces"], &wp = want["pieces"];
    for (size_t i = 0; i < std::max(gp.size(), wp.size()); i++) {
      LOOM_USER_CHECK(i < gp.size(), "checkpoint manifest '%s': tensor '%s' lacks the piece %s", path, name.c_str(),
                      short_json(wp[i]).c_str());
      LOOM_USER_CHECK(i < wp.size(), "checkpoint manifest '%s': tensor '%s' lists the piece %s, which no rank file holds",
                      path, name.c_str(), short_json(gp[i]).c_str());
      LOOM_USER_CHECK(gp[i] == wp[i], "checkpoint manifest '%s': tensor '%s' piece %zu is %s there, %s in its rank file",
                      path, name.c_str(), i, short_json(gp[i]).c_str(), short_json(wp[i]).c_str());
    }
  }
}

}  // namespace loom
