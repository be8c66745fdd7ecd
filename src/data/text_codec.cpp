#include "data/text_codec.h"

#include <filesystem>

#include "core/check.h"
#include "data/dataset_manifest.h"

namespace loom {

TextCodec TextCodec::for_data(const std::string& format, const std::string& data_path, const std::string& origin) {
  TextCodec c;
  if (format == "bytes") return c;
  LOOM_USER_CHECK(format == "shards", "%s: unknown data.format '%s'", origin.c_str(), format.c_str());
  // Older folders without a manifest still have their tokenizer.model.
  std::string name = "tokenizer.model";
  std::error_code ec;
  if (std::filesystem::exists(data_path + "/" + kManifestName, ec)) name = read_dataset_manifest(data_path).tokenizer;
  c.tokenizer = load_tokenizer(data_path + "/" + name);
  return c;
}

std::vector<int32_t> TextCodec::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (tokenizer) tokenizer->encode(text, &ids);
  else
    for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::vector<int32_t> TextCodec::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids;
  if (tokenizer && tokenizer->bos_id() >= 0) ids.push_back(tokenizer->bos_id());
  const std::vector<int32_t> rest = encode(text);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::string TextCodec::decode(const std::vector<int32_t>& ids) const {
  if (tokenizer) return tokenizer->decode(ids);
  std::string s;
  for (int32_t id : ids) s += char(uint8_t(id));
  return s;
}

}  // namespace loom
