// Text <-> token ids for a run's data format: the tokenizer of token shards
// (the one dataset.toml names: loom's SentencePiece tokenizer.model or a
// Hugging Face tokenizer.json), or one token per byte (data.format = "bytes").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/text_tokenizer.h"

namespace loom {

struct TextCodec {
  std::unique_ptr<TextTokenizer> tokenizer;  // null: one token per byte

  // format "shards": the tokenizer <data_path>/dataset.toml names (UserError
  // if missing or bad); "bytes": the byte codec. `origin` names the source
  // in messages.
  static TextCodec for_data(const std::string& format, const std::string& data_path, const std::string& origin);

  std::vector<int32_t> encode(const std::string& text) const;
  // A prompt: the tokenizer's BOS first when it adds one (Llama 3), then the text.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int eos() const { return tokenizer ? tokenizer->eos_id() : -1; }  // -1: none
};

}  // namespace loom
