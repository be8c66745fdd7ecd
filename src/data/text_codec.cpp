#include "data/text_codec.h"

#include "core/check.h"

namespace loom {

TextCodec TextCodec::for_data(const std::string& format, const std::string& data_path, const std::string& origin) {
  TextCodec c;
  if (format == "bytes") return c;
  LOOM_USER_CHECK(format == "shards", "%s: unknown data.format '%s'", origin.c_str(), format.c_str());
  c.sp = std::make_unique<Tokenizer>(Tokenizer::load(data_path + "/tokenizer.model"));
  return c;
}

std::vector<int32_t> TextCodec::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (sp) sp->encode(text, &ids);
  else
    for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string TextCodec::decode(const std::vector<int32_t>& ids) const {
  if (sp) return sp->decode(ids);
  std::string s;
  for (int32_t id : ids) s += char(uint8_t(id));
  return s;
}

}  // namespace loom
