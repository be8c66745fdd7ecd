// Text <-> token ids for a run's data format: the SentencePiece tokenizer of
// token shards, or one token per byte (data.format = "bytes").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace loom {

struct TextCodec {
  std::unique_ptr<Tokenizer> sp;  // null: one token per byte

  // format "shards": <data_path>/tokenizer.model (UserError if missing or
  // bad); "bytes": the byte codec. `origin` names the source in messages.
  static TextCodec for_data(const std::string& format, const std::string& data_path, const std::string& origin);

  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int eos() const { return sp ? sp->eos_id() : -1; }  // -1: none
};

}  // namespace loom
