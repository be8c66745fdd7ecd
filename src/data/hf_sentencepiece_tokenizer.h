// A SentencePiece tokenizer.model as Llama 2 and Mistral ship it, with the
// tokenizer_config.json beside it, encoding and decoding as transformers'
// LlamaTokenizer does:
//   - special tokens (bos, eos, unk, and added_tokens_decoder's) are cut out
//     of the text first, longest match; what lies between goes to the model;
//   - legacy = true (transformers' default when the field is absent): each
//     piece of text between special tokens gets the model's dummy prefix
//     ("<s>Hi" is <s> "▁Hi"); legacy = false: only the start of the text
//     does (add_prefix_space), text after a special token is encoded as it
//     stands ("<s>Hi" is <s> "Hi"): the model is loaded a second time with
//     its add_dummy_prefix switched off (a NormalizerSpec override appended
//     to the serialized model, which protobuf merges);
//   - the model's own byte fallback (<0x0A> for a byte with no piece);
//   - add_bos_token (default true) puts BOS before each document and
//     prompt, eos_token ends them; decode follows LlamaTokenizer's
//     convert_tokens_to_string (special tokens as text, the spaces it puts
//     around them) and clean_up_tokenization_spaces.
// loom's own SentencePiece models (data/tokenizer.h) have no
// tokenizer_config.json; load_tokenizer tells them apart by it.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "data/text_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

class HfSentencePieceTokenizer : public TextTokenizer {
 public:
  // `model_path` is the tokenizer.model; tokenizer_config.json must be beside it.
  static std::unique_ptr<HfSentencePieceTokenizer> load(const std::string& model_path);
  ~HfSentencePieceTokenizer() override;

  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  using TextTokenizer::encode;
  void encode_segments(const std::vector<TextSegment>& segments, std::vector<int32_t>* ids,
                       std::vector<uint8_t>* target) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  using TextTokenizer::decode;
  int vocab_size() const override;
  int eos_id() const override { return eos_; }
  int bos_id() const override { return add_bos_ ? bos_ : -1; }
  std::string kind() const override;
  std::string chat_template() const override { return chat_template_; }
  std::vector<std::pair<std::string, std::string>> files() const override { return files_; }
  bool legacy() const { return legacy_; }

 private:
  HfSentencePieceTokenizer();
  static std::unique_ptr<HfSentencePieceTokenizer> load_checked(const std::string& model_path);
  // A stretch of text between special tokens; `continuation`: it goes on
  // from the previous segment's (no dummy prefix, no unk trick).
  void encode_chunk(std::string_view chunk, bool continuation, std::vector<int32_t>* out) const;
  bool is_special(int32_t id) const;

  struct Special {
    std::string content;
    int32_t id;
  };
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;           // as the file says
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_no_prefix_;  // its dummy prefix off (legacy = false)
  std::vector<Special> specials_;  // longest first
  std::array<bool, 256> special_first_{};  // bytes a special token starts with
  bool legacy_ = true, add_prefix_space_ = true, add_bos_ = true, clean_up_spaces_ = false;
  int32_t bos_ = -1, eos_ = -1;
  std::string chat_template_;
  std::vector<std::pair<std::string, std::string>> files_;  // tokenizer.model, tokenizer_config.json
};

}  // namespace loom
