#include "data/text_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/regular_file.h"
#include "data/content_hash.h"
#include "data/hf_bpe_tokenizer.h"
#include "data/hf_sentencepiece_tokenizer.h"
#include "data/tokenizer.h"

namespace loom {

std::string clean_up_tokenization(std::string text) {
  for (const auto& [from, to] : std::initializer_list<std::pair<std::string_view, std::string_view>>{
           {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
           {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}) {
    std::string cleaned;
    size_t at = 0;
    for (size_t hit; (hit = text.find(from, at)) != std::string::npos; at = hit + from.size())
      cleaned.append(text, at, hit - at).append(to);
    cleaned.append(text, at);
    text.swap(cleaned);
  }
  return text;
}

namespace detail {
std::string read_chat_template(const nlohmann::json& c, const std::string& path) {
  if (!c.contains("chat_template") || c.at("chat_template").is_null()) return "";
  const nlohmann::json& t = c.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  LOOM_USER_CHECK(t.is_array(), "%s: field 'chat_template' must be a string or a list of {name, template}",
                  path.c_str());
  std::string first, chosen;
  for (const nlohmann::json& e : t) {
    LOOM_USER_CHECK(e.is_object() && e.contains("template") && e.at("template").is_string(),
                    "%s: field 'chat_template' must be a string or a list of {name, template}", path.c_str());
    if (first.empty()) first = e.at("template").get<std::string>();
    if (e.contains("name") && e.at("name").is_string() && e.at("name").get<std::string>() == "default")
      chosen = e.at("template").get<std::string>();
  }
  return chosen.empty() ? first : chosen;
}
}  // namespace detail

namespace {

// A tokenizer.json whose BPE model falls back to bytes: a SentencePiece
// model converted (Llama 2's), read from its tokenizer.model instead.
bool converted_sentencepiece(const std::string& json_path) {
  std::ifstream in(json_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    return j.contains("model") && j.at("model").is_object() && j.at("model").value("byte_fallback", false) == true;
  } catch (const nlohmann::json::exception&) {
    return false;  // HfBpeTokenizer names what is wrong with it
  }
}

}  // namespace

uint64_t tokenizer_files_hash(const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.size() == 1) return content_hash(files[0].second);
  ContentHash h;
  for (const auto& [name, bytes] : files) h.add(name).add(bytes);
  return h.value();
}

std::vector<std::pair<std::string, std::string>> tokenizer_files_in(const std::string& dir, const std::string& primary) {
  auto read = [](const std::string& path) {
    require_regular_file(path, "tokenizer file");
    std::ifstream in(path, std::ios::binary);
    LOOM_USER_CHECK(in.good(), "tokenizer file '%s' cannot be opened", path.c_str());
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  std::vector<std::pair<std::string, std::string>> files = {{primary, read(dir + "/" + primary)}};
  std::error_code ec;
  if (std::filesystem::exists(dir + "/tokenizer_config.json", ec))
    files.push_back({"tokenizer_config.json", read(dir + "/tokenizer_config.json")});
  return files;
}

std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string json = path + "/tokenizer.json", model = path + "/tokenizer.model";
    const bool has_json = fs::exists(json, ec), has_model = fs::exists(model, ec);
    if (has_model && (!has_json || converted_sentencepiece(json))) {
      LOOM_USER_CHECK(fs::exists(path + "/tokenizer_config.json", ec),
                      "tokenizer folder '%s' holds a tokenizer.model without the tokenizer_config.json that says how "
                      "Hugging Face uses it",
                      path.c_str());
      return HfSentencePieceTokenizer::load(model);
    }
    if (has_json) return std::make_unique<HfBpeTokenizer>(HfBpeTokenizer::load(json));
    throw UserError(strprintf("tokenizer folder '%s' holds no tokenizer.json or tokenizer.model", path.c_str()));
  }
  if (fs::path(path).extension() == ".json") return std::make_unique<HfBpeTokenizer>(HfBpeTokenizer::load(path));
  // A .model: Hugging Face's when its tokenizer_config.json is beside it, else loom's own.
  if (fs::exists(fs::path(path).parent_path() / "tokenizer_config.json", ec)) return HfSentencePieceTokenizer::load(path);
  return std::make_unique<Tokenizer>(Tokenizer::load(path));
}

}  // namespace loom
