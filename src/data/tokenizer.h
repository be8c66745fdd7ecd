// A SentencePiece BPE tokenizer that gives back every byte:
// decode(encode(text)) == text for any UTF-8 text.
//
// The models loom trains use byte fallback (a byte with no piece of its own
// becomes one of 256 byte tokens), identity normalization, no whitespace
// folding and no dummy prefix, and have "\n" as a piece of its own. encode()
// works line by line and inserts the newline id itself, which is both fast
// (SentencePiece's BPE is superlinear in the length of its input) and exact.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/text_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

class Tokenizer : public TextTokenizer {
 public:
  // Loads a SentencePiece .model file. Throws UserError naming the file if
  // it cannot be read, is not a model, has no end-of-text (eos) piece, or
  // does not give back text byte for byte (e.g. it normalizes).
  static Tokenizer load(const std::string& path);
  // The same from the model's bytes; `origin` names them in messages.
  static Tokenizer from_model(std::string model_bytes, const std::string& origin);

  // Trains a model on `lines` (no '\n' inside), returns its bytes, which
  // depend on nothing else (not on the machine). Throws UserError naming
  // `origin` if SentencePiece refuses (e.g. a vocabulary too large for the text).
  static std::string train(const std::vector<std::string_view>& lines, int vocab_size, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Appends the ids of `text` to `out`. Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  using TextTokenizer::encode;
  std::string decode(const int32_t* ids, size_t n) const override;
  using TextTokenizer::decode;

  int vocab_size() const override;
  int eos_id() const override;
  std::string kind() const override { return "SentencePiece BPE (loom's own)"; }
  std::vector<std::pair<std::string, std::string>> files() const override { return {{"tokenizer.model", model_}}; }
  uint64_t model_hash() const { return model_hash_; }  // content_hash of the model's bytes
  const std::string& model_bytes() const { return model_; }

 private:
  Tokenizer();
  void encode_line(std::string_view line, std::vector<int32_t>* out) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_;
  uint64_t model_hash_ = 0;
  int newline_id_ = -1;
  int lower_block_ids_[3] = {-1, -1, -1};  // the bytes of U+2581, which SentencePiece reads as a space
};

}  // namespace loom
