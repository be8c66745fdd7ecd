#include "data/hf_bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/regular_file.h"
#include "data/corpus.h"

namespace loom {

namespace {

using Json = nlohmann::json;

// The ByteLevel pre-tokenizer's own split (GPT-2's pattern).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Length of the UTF-8 character starting with byte b (1 for a stray byte).
size_t char_length(unsigned char b) { return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1; }

// The project's own check (data/corpus.h): an order faster than asking
// utf8proc to decompose the text.
bool valid_utf8(std::string_view s) { return find_invalid_utf8(s) == std::string_view::npos; }

}  // namespace

struct HfBpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

HfBpeTokenizer::HfBpeTokenizer() = default;
HfBpeTokenizer::HfBpeTokenizer(HfBpeTokenizer&&) noexcept = default;
HfBpeTokenizer& HfBpeTokenizer::operator=(HfBpeTokenizer&&) noexcept = default;
HfBpeTokenizer::~HfBpeTokenizer() = default;

HfBpeTokenizer HfBpeTokenizer::load(const std::string& path) {
  // A field of the wrong JSON type anywhere, named with the file.
  try {
    return load_checked(path);
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s (or tokenizer_config.json beside it): a field has the wrong type: %s", path.c_str(),
                              e.what()));
  }
}

HfBpeTokenizer HfBpeTokenizer::load_checked(const std::string& path) {
  require_regular_file(path, "tokenizer file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", path.c_str(), e.what()));
  }
  auto field = [&](const Json& at, const char* key) -> const Json& {
    LOOM_USER_CHECK(at.is_object() && at.contains(key), "%s: field '%s' is missing", path.c_str(), key);
    return at.at(key);
  };
  HfBpeTokenizer t;
  t.path_ = path;
  t.files_.push_back({"tokenizer.json", text.str()});
  const Json& model = field(j, "model");
  LOOM_USER_CHECK(field(model, "type") == "BPE", "%s: field 'model.type' is %s: loom reads byte-level BPE only",
                  path.c_str(), field(model, "type").dump().c_str());
  LOOM_USER_CHECK(!model.value("byte_fallback", false), "%s: field 'model.byte_fallback' is not supported",
                  path.c_str());
  t.ignore_merges_ = model.value("ignore_merges", false);
  for (const auto& [token, id] : field(model, "vocab").items()) {
    LOOM_USER_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                    "%s: vocab entry '%s' has no valid id", path.c_str(), token.c_str());
    t.vocab_[token] = id.get<int32_t>();
  }
  int rank = 0;
  for (const Json& m : field(model, "merges")) {
    std::string key;
    if (m.is_string()) key = m.get<std::string>();
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      key = m[0].get<std::string>() + " " + m[1].get<std::string>();
    LOOM_USER_CHECK(!key.empty() && key.find(' ') != std::string::npos, "%s: merge %d is not a pair", path.c_str(),
                    rank);
    t.merge_rank_.emplace(key, rank++);
  }
  if (j.contains("added_tokens"))
    for (const Json& a : j.at("added_tokens")) {
      const std::string content = field(a, "content").get<std::string>();
      LOOM_USER_CHECK(!content.empty(), "%s: an added token is empty", path.c_str());
      const Json& id = field(a, "id");
      LOOM_USER_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                      "%s: added token '%s' has no valid id", path.c_str(), content.c_str());
      t.added_.push_back({content, id.get<int32_t>()});
    }
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  // Normalizer: none or NFC.
  if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
    const Json& n = j.at("normalizer");
    LOOM_USER_CHECK(field(n, "type") == "NFC", "%s: field 'normalizer.type' %s is not supported (none or NFC)",
                    path.c_str(), field(n, "type").dump().c_str());
    t.nfc_ = true;
  }
  // Pre-tokenizer: ByteLevel (its own regex), or Sequence[Split(regex,
  // Isolated), ByteLevel(use_regex false)].
  const Json& pre = field(j, "pre_tokenizer");
  std::string pattern;
  const Json* byte_level = nullptr;
  if (field(pre, "type") == "ByteLevel") {
    byte_level = &pre;
    LOOM_USER_CHECK(pre.value("use_regex", true), "%s: a ByteLevel pre-tokenizer without its regex splits nothing",
                    path.c_str());
    pattern = kGpt2Pattern;
  } else if (field(pre, "type") == "Sequence" && field(pre, "pretokenizers").size() == 2) {
    const Json& split = pre.at("pretokenizers")[0];
    byte_level = &pre.at("pretokenizers")[1];
    LOOM_USER_CHECK(field(split, "type") == "Split" && field(split, "behavior") == "Isolated" &&
                        !split.value("invert", false) && field(split, "pattern").contains("Regex"),
                    "%s: field 'pre_tokenizer.pretokenizers[0]' must be an Isolated Split by a Regex", path.c_str());
    LOOM_USER_CHECK(field(*byte_level, "type") == "ByteLevel" && !byte_level->value("use_regex", true),
                    "%s: field 'pre_tokenizer.pretokenizers[1]' must be ByteLevel without its own regex",
                    path.c_str());
    pattern = split.at("pattern").at("Regex").get<std::string>();
  } else {
    throw UserError(strprintf("%s: field 'pre_tokenizer' %s is not supported (ByteLevel, or a Split then ByteLevel)",
                              path.c_str(), field(pre, "type").dump().c_str()));
  }
  t.add_prefix_space_ = byte_level->value("add_prefix_space", false);
  int error = 0;
  PCRE2_SIZE offset = 0;
  t.split_ = std::make_unique<Regex>();
  t.split_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!t.split_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw UserError(strprintf("%s: the split pattern does not compile at offset %zu: %s", path.c_str(),
                              size_t(offset), reinterpret_cast<const char*>(message)));
  }
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
  // others for 256, 257, ... in order.
  int next = 0;
  for (int b = 0; b < 256; b++) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    t.byte_char_[b] = utf8(printable ? uint32_t(b) : uint32_t(256 + next++));
    t.char_byte_[t.byte_char_[b]] = uint8_t(b);
  }
  // Ids are dense: below the count of tokens and added tokens.
  const size_t count = t.vocab_.size() + t.added_.size();
  for (const auto& [token, id] : t.vocab_)
    LOOM_USER_CHECK(size_t(id) < count, "%s: vocab entry '%s' has id %d, beyond the %zu tokens", path.c_str(),
                    token.c_str(), id, count);
  for (const Added& a : t.added_)
    LOOM_USER_CHECK(size_t(a.id) < count, "%s: added token '%s' has id %d, beyond the %zu tokens", path.c_str(),
                    a.content.c_str(), a.id, count);
  t.id_to_token_.resize(t.vocab_.size());
  for (const auto& [token, id] : t.vocab_) {
    if (size_t(id) >= t.id_to_token_.size()) t.id_to_token_.resize(size_t(id) + 1);
    t.id_to_token_[size_t(id)] = token;
  }
  for (const Added& a : t.added_) {
    if (size_t(a.id) >= t.id_to_token_.size()) t.id_to_token_.resize(size_t(a.id) + 1);
    t.id_to_token_[size_t(a.id)] = a.content;
  }
  for (const Added& a : t.added_) t.added_first_[static_cast<unsigned char>(a.content[0])] = true;
  t.read_specials(j);
  return t;
}

// BOS from the post-processor; EOS and the decode clean-up from
// tokenizer_config.json beside the file.
void HfBpeTokenizer::read_specials(const Json& j) {
  if (j.contains("post_processor") && j.at("post_processor").is_object()) {
    const Json& p = j.at("post_processor");
    // TemplateProcessing, alone or first in a Sequence (Llama 3: a
    // Sequence of ByteLevel and TemplateProcessing).
    std::vector<const Json*> steps = {&p};
    if (p.value("type", "") == "Sequence" && p.contains("processors") && p.at("processors").is_array())
      for (const Json& q : p.at("processors")) steps.push_back(&q);
    for (const Json* q : steps)
      if (q->value("type", "") == "TemplateProcessing" && q->contains("single") && q->at("single").is_array() &&
          !q->at("single").empty() && q->at("single")[0].contains("SpecialToken")) {
        const std::string name = q->at("single")[0].at("SpecialToken").value("id", "");
        bos_ = token_id(name);
        LOOM_USER_CHECK(bos_ >= 0, "%s: field 'post_processor' puts '%s' first, which is not a token", path_.c_str(),
                        name.c_str());
      }
  }
  const std::string config_path = (std::filesystem::path(path_).parent_path() / "tokenizer_config.json").string();
  std::string eos_name;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    require_regular_file(config_path, "tokenizer config");
    std::ifstream in(config_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    files_.push_back({"tokenizer_config.json", text.str()});
    Json c;
    try {
      c = Json::parse(text.str());
    } catch (const Json::exception& e) {
      throw UserError(strprintf("%s: not valid JSON: %s", config_path.c_str(), e.what()));
    }
    LOOM_USER_CHECK(c.is_object(), "%s: expected a JSON object", config_path.c_str());
    if (c.contains("eos_token") && !c.at("eos_token").is_null()) {
      const Json& e = c.at("eos_token");  // a string, or an AddedToken object with "content"
      LOOM_USER_CHECK(e.is_string() || (e.is_object() && e.contains("content") && e.at("content").is_string()),
                      "%s: field 'eos_token' must be a string or an object with 'content'", config_path.c_str());
      eos_name = e.is_string() ? e.get<std::string>() : e.at("content").get<std::string>();
      eos_ = token_id(eos_name);
      LOOM_USER_CHECK(eos_ >= 0, "%s: field 'eos_token' names '%s', which %s does not hold", config_path.c_str(),
                      eos_name.c_str(), path_.c_str());
    }
    chat_template_ = detail::read_chat_template(c, config_path);
    if (c.contains("clean_up_tokenization_spaces")) {
      LOOM_USER_CHECK(c.at("clean_up_tokenization_spaces").is_boolean(),
                      "%s: field 'clean_up_tokenization_spaces' must be true or false", config_path.c_str());
      clean_up_spaces_ = c.at("clean_up_tokenization_spaces").get<bool>();
    }
  }
  if (eos_ < 0) eos_ = token_id("<|endoftext|>");
  LOOM_USER_CHECK(eos_ >= 0,
                  "%s: no end-of-text token: tokenizer_config.json beside it has no 'eos_token' and the vocabulary "
                  "has no <|endoftext|>",
                  path_.c_str());
}

int32_t HfBpeTokenizer::token_id(const std::string& token) const {
  for (const Added& a : added_)
    if (a.content == token) return a.id;
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void HfBpeTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  encode_parts({{text, true}}, out, nullptr);
}

void HfBpeTokenizer::encode_segments(const std::vector<TextSegment>& segments, std::vector<int32_t>* ids,
                                     std::vector<uint8_t>* target) const {
  encode_parts(segments, ids, target);
}

// Added tokens are cut out of each segment first (the longest at each
// position); the text between two of them may run across segments: it is
// normalized and split as one stretch, so the pieces are the whole text's.
void HfBpeTokenizer::encode_parts(const std::vector<TextSegment>& segments, std::vector<int32_t>* out,
                                  std::vector<uint8_t>* target) const {
  std::vector<TextSegment> stretch;
  for (const TextSegment& seg : segments) {
    const std::string_view text = seg.text;
    LOOM_USER_CHECK(valid_utf8(text), "%s: the text to encode is not valid UTF-8", path_.c_str());
    size_t start = 0, at = 0;
    while (at < text.size()) {
      if (!added_first_[static_cast<unsigned char>(text[at])]) {  // no added token starts with this byte
        at++;
        continue;
      }
      const Added* hit = nullptr;
      for (const Added& a : added_)
        if (text.compare(at, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      if (!hit) {
        at++;
        continue;
      }
      if (at > start) stretch.push_back({text.substr(start, at - start), seg.target});
      encode_stretch(stretch, out, target);
      stretch.clear();
      out->push_back(hit->id);
      if (target) target->push_back(seg.target ? 1 : 0);
      at += hit->content.size();
      start = at;
    }
    if (text.size() > start) stretch.push_back({text.substr(start), seg.target});
  }
  encode_stretch(stretch, out, target);
}

// One stretch of text without added tokens, in parts: each part normalized
// on its own, then the split regex over their concatenation; a piece is a
// target when the part its first byte comes from is.
void HfBpeTokenizer::encode_stretch(const std::vector<TextSegment>& parts, std::vector<int32_t>* out,
                                    std::vector<uint8_t>* target) const {
  std::string normal;
  std::vector<size_t> ends;  // of each part in `normal`
  std::vector<uint8_t> flags;
  for (const TextSegment& part : parts) {
    if (part.text.empty()) continue;
    if (nfc_) {
      const std::string text(part.text);
      utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
      LOOM_USER_CHECK(nfc, "%s: NFC normalization failed", path_.c_str());
      normal += reinterpret_cast<const char*>(nfc);
      std::free(nfc);
    } else {
      normal += part.text;
    }
    ends.push_back(normal.size());
    flags.push_back(part.target ? 1 : 0);
  }
  if (normal.empty()) return;
  if (add_prefix_space_ && normal[0] != ' ') {
    normal.insert(normal.begin(), ' ');
    for (size_t& e : ends) e++;
  }
  size_t part = 0;
  auto piece = [&](size_t begin, size_t n) {
    encode_piece(std::string_view(normal).substr(begin, n), out);
    if (!target) return;
    while (begin >= ends[part]) part++;  // pieces come in order
    target->resize(out->size(), flags[part]);
  };
  // Isolated split: every match a piece, and every gap between matches too.
  // Match data of this call's own: encoding threads share the tokenizer.
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(split_->code, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(normal.data());
  size_t pos = 0;
  while (pos < normal.size()) {
    // The text was checked as UTF-8 once (encode): PCRE2 would otherwise check
    // the whole subject again on every call, quadratic in a long document.
    const int rc = pcre2_match(split_->code, subject, normal.size(), pos, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc < 0) {
      piece(pos, normal.size() - pos);
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    if (ov[0] > pos) piece(pos, ov[0] - pos);
    if (ov[1] == ov[0]) {  // an empty match: step over one character
      const size_t n = char_length(static_cast<unsigned char>(normal[ov[0]]));
      piece(ov[0], n);
      pos = ov[0] + n;
      continue;
    }
    piece(ov[0], ov[1] - ov[0]);
    pos = ov[1];
  }
}

void HfBpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  constexpr size_t kCacheEntries = 1 << 16;
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (const auto hit = cache_.find(key); hit != cache_.end()) {
      out->insert(out->end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  auto remember = [&](std::vector<int32_t> ids) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(key, std::move(ids));
  };
  std::vector<int32_t> ids;
  std::vector<std::string> symbols;
  std::string whole;
  for (unsigned char b : piece) symbols.push_back(byte_char_[b]), whole += byte_char_[b];
  if (ignore_merges_)
    if (const auto it = vocab_.find(whole); it != vocab_.end()) {
      out->push_back(it->second);
      remember({it->second});
      return;
    }
  // Merge the lowest-ranked adjacent pair, every occurrence left to right, until none is a merge.
  while (symbols.size() > 1) {
    int best = INT_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); i++)
      if (const auto it = merge_rank_.find(symbols[i] + " " + symbols[i + 1]); it != merge_rank_.end())
        best = std::min(best, it->second);
    if (best == INT_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); i++) {
      if (i + 1 < symbols.size()) {
        const auto it = merge_rank_.find(symbols[i] + " " + symbols[i + 1]);
        if (it != merge_rank_.end() && it->second == best) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          i++;
          continue;
        }
      }
      merged.push_back(symbols[i]);
    }
    symbols.swap(merged);
  }
  for (const std::string& s : symbols) {
    const auto it = vocab_.find(s);
    LOOM_USER_CHECK(it != vocab_.end(), "%s: the vocabulary has no token for a byte of the text", path_.c_str());
    ids.push_back(it->second);
  }
  out->insert(out->end(), ids.begin(), ids.end());
  remember(std::move(ids));
}

std::string HfBpeTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t k = 0; k < n; k++) {
    const int32_t id = ids[k];
    LOOM_USER_CHECK(id >= 0 && size_t(id) < id_to_token_.size(), "%s: token id %d is outside the vocabulary",
                    path_.c_str(), id);
    const std::string& token = id_to_token_[size_t(id)];
    // A token whose every character is a byte's stands for those bytes;
    // any other (an added token's text) for itself.
    std::string bytes;
    bool all = true;
    for (size_t i = 0; i < token.size() && all;) {
      const size_t n = char_length(static_cast<unsigned char>(token[i]));
      const auto it = char_byte_.find(token.substr(i, n));
      if (it == char_byte_.end()) all = false;
      else bytes += char(it->second);
      i += n;
    }
    out += all ? bytes : token;
  }
  return clean_up_spaces_ ? clean_up_tokenization(out) : out;
}

}  // namespace loom
