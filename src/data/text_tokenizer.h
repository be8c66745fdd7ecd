// Text <-> token ids, whichever tokenizer a run uses: loom's own
// SentencePiece models (data/tokenizer.h, trained by `loom prepare`) or a
// Hugging Face tokenizer as a checkpoint ships it (data/hf_bpe_tokenizer.h:
// tokenizer.json with a byte-level BPE model, as GPT-2, Llama 3 and Qwen2
// publish theirs). `loom prepare --tokenizer`, the token loader, the
// trainer's sample and `loom generate` all go through this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace loom {

// A stretch of a text, learned from (target) or not: a chat's rendered turns.
struct TextSegment {
  std::string_view text;
  bool target = false;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // Appends the ids of `text`, special tokens in the text recognised, none
  // added (no BOS / EOS). Thread-safe.
  virtual void encode(std::string_view text, std::vector<int32_t>* out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode(text, &ids);
    return ids;
  }
  // The segments' text, encoded as their concatenation is (the segments
  // meet where the tokenization splits anyway: at special tokens, line ends,
  // word starts), each id marked in `target` (1 / 0) as its segment is
  // (`target` holds an entry for each id already in `ids`).
  // SentencePiece continues a stretch of text across segments without a new
  // dummy prefix.
  virtual void encode_segments(const std::vector<TextSegment>& segments, std::vector<int32_t>* ids,
                               std::vector<uint8_t>* target) const {
    for (const TextSegment& s : segments) {
      encode(s.text, ids);
      target->resize(ids->size(), s.target ? 1 : 0);
    }
  }
  // As the tokenizer's own library decodes (Hugging Face: with
  // clean_up_tokenization_spaces as its tokenizer_config.json says).
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

  virtual int vocab_size() const = 0;
  // End of text: after each document of `loom prepare`, and where sampling stops.
  virtual int eos_id() const = 0;
  // Put before each document and prompt when the tokenizer adds one (Llama
  // 3's <|begin_of_text|>); -1: none.
  virtual int bos_id() const { return -1; }
  // tokenizer_config.json's chat_template (Jinja source; the "default" one
  // of a list), "" when there is none.
  virtual std::string chat_template() const { return ""; }
  // For the log: "SentencePiece BPE (loom's own)", "Hugging Face byte-level BPE".
  virtual std::string kind() const = 0;
  // The files that make it up, (name, bytes), the one that identifies it
  // first: what `loom prepare` copies into the dataset folder.
  virtual std::vector<std::pair<std::string, std::string>> files() const = 0;
};

// transformers' clean_up_tokenization (clean_up_tokenization_spaces): the
// space before . ? ! , and English contractions dropped, in its order.
std::string clean_up_tokenization(std::string text);

// tokenizer_config.json's "chat_template": a string, or a list of {"name",
// "template"} (the "default" one, else the first); "" when absent. Throws
// UserError naming `path` when it is neither.
namespace detail {
std::string read_chat_template(const nlohmann::json& config, const std::string& path);
}

// What dataset.toml and the shard headers record of a tokenizer's files:
// the content_hash of its one file (as before Hugging Face tokenizers), or,
// with several, of each name and content in order.
uint64_t tokenizer_files_hash(const std::vector<std::pair<std::string, std::string>>& files);
// The files of the tokenizer whose first file is dir/primary, as
// TextTokenizer::files() names them: primary, then tokenizer_config.json
// when it is beside it. Throws UserError naming a file it cannot read.
std::vector<std::pair<std::string, std::string>> tokenizer_files_in(const std::string& dir, const std::string& primary);

// A tokenizer from `path`: a SentencePiece .model file (loom's own, or,
// with a tokenizer_config.json beside it, Llama 2's or Mistral's:
// data/hf_sentencepiece_tokenizer.h); a Hugging Face tokenizer.json (with
// tokenizer_config.json beside it, if there is one); or a checkpoint's
// folder: its tokenizer.model when there is one and its tokenizer.json (if
// any) is not byte-level (Llama 2 ships both; its tokenizer.json is the
// SentencePiece model converted, byte_fallback set), else its tokenizer.json. Throws UserError naming the file and field it cannot read.
std::unique_ptr<TextTokenizer> load_tokenizer(const std::string& path);

}  // namespace loom
