#include "data/hf_sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/regular_file.h"

namespace loom {
namespace {

using Json = nlohmann::json;
constexpr const char* kUnderline = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string read_all(const std::string& path, const char* what) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_model(const std::string& bytes, const std::string& path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->LoadFromSerializedProto(bytes);
  LOOM_USER_CHECK(status.ok(), "%s: not a SentencePiece model: %s", path.c_str(), status.ToString().c_str());
  return sp;
}

// A token field of tokenizer_config.json: a string, or an AddedToken object
// with "content"; "" when absent or null.
std::string token_text(const Json& c, const char* key, const std::string& path) {
  if (!c.contains(key) || c.at(key).is_null()) return "";
  const Json& v = c.at(key);
  LOOM_USER_CHECK(v.is_string() || (v.is_object() && v.contains("content") && v.at("content").is_string()),
                  "%s: field '%s' must be a string or an object with 'content'", path.c_str(), key);
  return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
}

bool flag(const Json& c, const char* key, bool fallback, const std::string& path) {
  if (!c.contains(key) || c.at(key).is_null()) return fallback;
  LOOM_USER_CHECK(c.at(key).is_boolean(), "%s: field '%s' must be true or false", path.c_str(), key);
  return c.at(key).get<bool>();
}

}  // namespace

HfSentencePieceTokenizer::HfSentencePieceTokenizer() = default;
HfSentencePieceTokenizer::~HfSentencePieceTokenizer() = default;

std::unique_ptr<HfSentencePieceTokenizer> HfSentencePieceTokenizer::load(const std::string& model_path) {
  // A field of the wrong JSON type anywhere, named with the file.
  try {
    return load_checked(model_path);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(strprintf("%s: a field of tokenizer_config.json beside it has the wrong type: %s",
                              model_path.c_str(), e.what()));
  }
}

std::unique_ptr<HfSentencePieceTokenizer> HfSentencePieceTokenizer::load_checked(const std::string& model_path) {
  const std::string config_path =
      (std::filesystem::path(model_path).parent_path() / "tokenizer_config.json").string();
  std::unique_ptr<HfSentencePieceTokenizer> t(new HfSentencePieceTokenizer());
  t->path_ = model_path;
  const std::string model = read_all(model_path, "tokenizer model");
  const std::string config_text = read_all(config_path, "tokenizer config");
  t->files_ = {{"tokenizer.model", model}, {"tokenizer_config.json", config_text}};
  t->sp_ = load_model(model, model_path);
  // NormalizerSpec (ModelProto field 3) { add_dummy_prefix (field 3) = false },
  // appended: protobuf merges a repeated embedded message into the first.
  t->sp_no_prefix_ = load_model(model + std::string("\x1a\x02\x18\x00", 4), model_path);
  Json c;
  try {
    c = Json::parse(config_text);
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", config_path.c_str(), e.what()));
  }
  LOOM_USER_CHECK(c.is_object(), "%s: expected a JSON object", config_path.c_str());
  t->legacy_ = flag(c, "legacy", true, config_path);
  t->add_prefix_space_ = flag(c, "add_prefix_space", true, config_path);
  t->add_bos_ = flag(c, "add_bos_token", true, config_path);
  LOOM_USER_CHECK(!flag(c, "add_eos_token", false, config_path),
                  "%s: field 'add_eos_token' = true is not supported (loom ends each document with EOS itself)",
                  config_path.c_str());
  t->clean_up_spaces_ = flag(c, "clean_up_tokenization_spaces", false, config_path);
  t->chat_template_ = detail::read_chat_template(c, config_path);
  const int pieces = t->sp_->GetPieceSize();
  auto id_of = [&](const std::string& text, const char* key) {
    const int id = t->sp_->PieceToId(text);
    LOOM_USER_CHECK(!text.empty() && (id != t->sp_->unk_id() || text == t->sp_->IdToPiece(id)),
                    "%s: field '%s' names '%s', which %s does not hold", config_path.c_str(), key, text.c_str(),
                    model_path.c_str());
    return int32_t(id);
  };
  // Special tokens: the named ones, and added_tokens_decoder's.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const std::string text = token_text(c, key, config_path);
    if (text.empty()) continue;
    const int32_t id = id_of(text, key);
    t->specials_.push_back({text, id});
    if (std::string(key) == "bos_token") t->bos_ = id;
    if (std::string(key) == "eos_token") t->eos_ = id;
  }
  if (c.contains("added_tokens_decoder")) {
    const Json& added = c.at("added_tokens_decoder");
    LOOM_USER_CHECK(added.is_object(), "%s: field 'added_tokens_decoder' must be an object", config_path.c_str());
    for (const auto& [key, value] : added.items()) {
      LOOM_USER_CHECK(value.is_object() && value.contains("content") && value.at("content").is_string() &&
                          !value.at("content").get<std::string>().empty(),
                      "%s: field 'added_tokens_decoder.%s' has no content", config_path.c_str(), key.c_str());
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (...) {
      }
      LOOM_USER_CHECK(id >= 0 && id < pieces, "%s: field 'added_tokens_decoder' key '%s' is not an id of the model's %d",
                      config_path.c_str(), key.c_str(), pieces);
      t->specials_.push_back({value.at("content").get<std::string>(), int32_t(id)});
    }
  }
  if (t->bos_ < 0 && t->sp_->bos_id() >= 0) t->bos_ = t->sp_->bos_id();
  if (t->eos_ < 0 && t->sp_->eos_id() >= 0) t->eos_ = t->sp_->eos_id();
  LOOM_USER_CHECK(t->eos_ >= 0, "%s: no end-of-text token (field 'eos_token', or the model's eos piece)",
                  config_path.c_str());
  LOOM_USER_CHECK(!t->add_bos_ || t->bos_ >= 0, "%s: add_bos_token, but no BOS (field 'bos_token')",
                  config_path.c_str());
  for (const Special& x : t->specials_) t->special_first_[static_cast<unsigned char>(x.content[0])] = true;
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [](const Special& a, const Special& b) { return a.content.size() > b.content.size(); });
  return t;
}

int HfSentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::string HfSentencePieceTokenizer::kind() const {
  return std::string("Hugging Face SentencePiece (") + path_ + ", legacy " + (legacy_ ? "true" : "false") + ")";
}

bool HfSentencePieceTokenizer::is_special(int32_t id) const {
  for (const Special& s : specials_)
    if (s.id == id) return true;
  return false;
}

// LlamaTokenizer._tokenize: legacy, the model as it is (its dummy prefix on
// each chunk); else the prefix off, and a chunk that starts with a space
// encoded after the unk token's text, whose pieces are then dropped.
void HfSentencePieceTokenizer::encode_chunk(std::string_view chunk, bool continuation, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  auto encode = [&](const sentencepiece::SentencePieceProcessor& sp, std::string_view text, std::vector<int>* into) {
    const auto status = sp.Encode(text, into);
    LOOM_USER_CHECK(status.ok(), "%s: SentencePiece cannot encode the text: %s", path_.c_str(),
                    status.ToString().c_str());
  };
  if (continuation) {
    encode(*sp_no_prefix_, chunk, &ids);
  } else if (legacy_) {
    encode(*sp_, chunk, &ids);
  } else if (!(chunk.rfind(kUnderline, 0) == 0 || chunk.rfind(" ", 0) == 0)) {
    encode(*sp_no_prefix_, chunk, &ids);
  } else {
    const std::string unk = sp_->IdToPiece(sp_->unk_id());
    std::vector<int> unk_ids;
    encode(*sp_no_prefix_, unk, &unk_ids);
    encode(*sp_no_prefix_, unk + std::string(chunk), &ids);
    if (ids.size() >= unk_ids.size()) ids.erase(ids.begin(), ids.begin() + std::ptrdiff_t(unk_ids.size()));
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

void HfSentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<uint8_t> target(out->size());
  encode_segments({{text, true}}, out, &target);
}

// LlamaTokenizer.tokenize over the segments' concatenation: special tokens
// cut out, the stretches between them encoded, a stretch that crosses into
// the next segment continued there.
void HfSentencePieceTokenizer::encode_segments(const std::vector<TextSegment>& segments, std::vector<int32_t>* out,
                                               std::vector<uint8_t>* target) const {
  size_t total = 0;
  for (const TextSegment& s : segments) total += s.text.size();
  if (total == 0) return;
  const size_t first = out->size();
  bool chunk_start = true;  // at the start of the text, or just after a special token
  for (size_t k = 0; k < segments.size(); k++) {
    std::string text(segments[k].text);
    if (!legacy_) {
      // U+2581 read as a space, the prefix added once, at the start.
      std::string spaced;
      for (size_t at = 0, hit; at <= text.size(); at = hit + 3) {
        hit = text.find(kUnderline, at);
        if (hit == std::string::npos) hit = text.size();
        spaced.append(text, at, hit - at);
        if (hit < text.size()) spaced += ' ';
      }
      text = k == 0 && add_prefix_space_ ? kUnderline + spaced : spaced;
    }
    const uint8_t mark = segments[k].target ? 1 : 0;
    size_t start = 0, at = 0;
    auto flush = [&](size_t end) {
      if (end <= start) return;
      encode_chunk(std::string_view(text).substr(start, end - start), !chunk_start, out);
      target->resize(out->size(), mark);
      chunk_start = false;
    };
    while (at < text.size()) {
      if (!special_first_[static_cast<unsigned char>(text[at])]) {
        at++;
        continue;
      }
      const Special* hit = nullptr;
      for (const Special& s : specials_)
        if (text.compare(at, s.content.size(), s.content) == 0) {
          hit = &s;
          break;
        }
      if (!hit) {
        at++;
        continue;
      }
      flush(at);
      out->push_back(hit->id);
      target->push_back(mark);
      at += hit->content.size();
      start = at;
      chunk_start = true;
    }
    flush(text.size());
  }
  // A lone prefix before a special token is dropped.
  if (!legacy_ && out->size() - first > 1 && sp_->IdToPiece((*out)[first]) == kUnderline &&
      is_special((*out)[first + 1])) {
    out->erase(out->begin() + std::ptrdiff_t(first));
    target->erase(target->begin() + std::ptrdiff_t(first));
  }
}

// LlamaTokenizer.convert_tokens_to_string, then the clean-up.
std::string HfSentencePieceTokenizer::decode(const int32_t* ids, size_t n) const {
  const sentencepiece::SentencePieceProcessor& sp = legacy_ ? *sp_ : *sp_no_prefix_;
  std::vector<std::string> tokens;
  for (size_t k = 0; k < n; k++) {
    LOOM_USER_CHECK(ids[k] >= 0 && ids[k] < sp.GetPieceSize(), "%s: token id %d is outside the vocabulary",
                    path_.c_str(), ids[k]);
    tokens.push_back(sp.IdToPiece(ids[k]));
  }
  if (!tokens.empty() && add_prefix_space_ && tokens[0].rfind(kUnderline, 0) == 0) tokens[0] = tokens[0].substr(3);
  std::string out;
  std::vector<std::string> pending;
  bool prev_special = false;
  for (size_t i = 0; i < tokens.size(); i++) {
    if (is_special(ids[i])) {
      if (!prev_special && i != 0 && legacy_) out += ' ';
      out += sp.DecodePieces(pending) + tokens[i];
      prev_special = true;
      pending.clear();
    } else {
      if (prev_special && i == 1 && add_prefix_space_ && tokens[i].rfind(kUnderline, 0) != 0) out += ' ';
      pending.push_back(tokens[i]);
      prev_special = false;
    }
  }
  out += sp.DecodePieces(pending);
  return clean_up_spaces_ ? clean_up_tokenization(out) : out;
}

}  // namespace loom
