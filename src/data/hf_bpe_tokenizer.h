// A Hugging Face tokenizer.json with a byte-level BPE model, as GPT-2,
// Llama 3 and Qwen2 publish theirs, encoding and decoding as the
// `tokenizers` library does:
//   1. added tokens (special or not) are cut out first, longest match at
//      each position, and become their ids;
//   2. the rest is normalized (none, or NFC through utf8proc, as Qwen2's is);
//   3. pre-tokenized by the split regex (PCRE2 with Unicode properties:
//      the ByteLevel pre-tokenizer's GPT-2 pattern, or a Split's own
//      pattern, Isolated: every match and every gap a piece of its own);
//   4. each piece's bytes mapped to GPT-2's printable characters
//      (bytes_to_unicode), then merged pair by pair, lowest merge rank
//      first (with ignore_merges, as Llama 3 sets it, a piece that is a
//      token of its own is taken whole);
//   5. decode maps the characters back to bytes (added tokens as they are),
//      then, with clean_up_tokenization_spaces, drops the spaces before
//      punctuation and contractions as transformers' decode() does.
// Anything else in the file (a WordPiece or Unigram model, another
// normalizer or pre-tokenizer, byte_fallback) is refused naming the file
// and field (UserError). Text must be valid UTF-8.
//
// tokenizer_config.json beside tokenizer.json, when there is one, gives
// eos_token and clean_up_tokenization_spaces (false when absent, as
// transformers >= 4.45 and 5.x default); the BOS is the special token the
// tokenizer.json post-processor's TemplateProcessing puts first (Llama 3's
// <|begin_of_text|>). Without an eos_token, <|endoftext|> if the vocabulary
// has it, else refused naming the file.
#pragma once

#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/text_tokenizer.h"

namespace loom {

class HfBpeTokenizer : public TextTokenizer {
 public:
  static HfBpeTokenizer load(const std::string& path);
  HfBpeTokenizer(HfBpeTokenizer&&) noexcept;
  HfBpeTokenizer& operator=(HfBpeTokenizer&&) noexcept;
  ~HfBpeTokenizer();

  // The ids of `text` (no special tokens added; those in the text are
  // recognised). Throws UserError if the text is not valid UTF-8.
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  using TextTokenizer::encode;
  // The stretches between added tokens split as the whole text's, each
  // piece marked by the segment its first byte is in.
  void encode_segments(const std::vector<TextSegment>& segments, std::vector<int32_t>* ids,
                       std::vector<uint8_t>* target) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  using TextTokenizer::decode;
  int vocab_size() const override { return int(id_to_token_.size()); }
  int eos_id() const override { return eos_; }
  int bos_id() const override { return bos_; }
  std::string kind() const override { return "Hugging Face byte-level BPE (" + path_ + ")"; }
  std::string chat_template() const override { return chat_template_; }
  std::vector<std::pair<std::string, std::string>> files() const override { return files_; }
  // The id of a token or added token by its text (-1: none).
  int32_t token_id(const std::string& token) const;

 private:
  HfBpeTokenizer();
  static HfBpeTokenizer load_checked(const std::string& path);
  void read_specials(const nlohmann::json& tokenizer_json);
  // target: nullptr, or one flag per id appended.
  void encode_parts(const std::vector<TextSegment>& segments, std::vector<int32_t>* out,
                    std::vector<uint8_t>* target) const;
  void encode_stretch(const std::vector<TextSegment>& parts, std::vector<int32_t>* out,
                      std::vector<uint8_t>* target) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;

  struct Added {
    std::string content;
    int32_t id;
  };
  struct Regex;
  std::string path_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::vector<Added> added_;                         // longest first
  std::array<bool, 256> added_first_{};              // bytes an added token starts with
  std::unique_ptr<Regex> split_;
  bool ignore_merges_ = false, nfc_ = false, add_prefix_space_ = false, clean_up_spaces_ = false;
  int32_t eos_ = -1, bos_ = -1;
  std::string chat_template_;
  std::vector<std::pair<std::string, std::string>> files_;  // tokenizer.json, tokenizer_config.json
  std::string byte_char_[256];                 // byte -> its printable character (UTF-8)
  std::unordered_map<std::string, uint8_t> char_byte_;
  // Pieces already encoded (words repeat): bounded, cleared when full,
  // shared by the threads that encode.
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
};

}  // namespace loom
