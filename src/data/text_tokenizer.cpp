#include "data/text_tokenizer.h"

#include <filesystem>

#include "core/check.h"
#include "data/hf_bpe_tokenizer.h"
#include "data/tokenizer.h"

namespace loom {

std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string json = path + "/tokenizer.json";
    if (fs::exists(json, ec)) return std::make_unique<HfBpeTokenizer>(HfBpeTokenizer::load(json));
    LOOM_USER_CHECK(!fs::exists(path + "/tokenizer.model", ec),
                    "tokenizer folder '%s' holds a SentencePiece tokenizer.model but no tokenizer.json: loom reads "
                    "Hugging Face tokenizer.json files (byte-level BPE) and its own SentencePiece models",
                    path.c_str());
    throw UserError(strprintf("tokenizer folder '%s' holds no tokenizer.json", path.c_str()));
  }
  if (fs::path(path).extension() == ".json") return std::make_unique<HfBpeTokenizer>(HfBpeTokenizer::load(path));
  return std::make_unique<Tokenizer>(Tokenizer::load(path));
}

}  // namespace loom
