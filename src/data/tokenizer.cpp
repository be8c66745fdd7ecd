#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <iterator>
#include <unordered_map>

#include "core/check.h"
#include "core/regular_file.h"
#include "data/content_hash.h"

namespace loom {
namespace {

constexpr std::string_view kLowerBlock = "\xE2\x96\x81";  // U+2581, SentencePiece's space symbol

// Feeds training lines to SentencePiece without copying them all.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string_view>& lines) : lines_(lines) { load(); }
  bool done() const override { return next_ > lines_.size(); }
  void Next() override { load(); }
  const std::string& value() const override { return current_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (next_ < lines_.size()) current_.assign(lines_[next_]);
    next_++;
  }
  const std::vector<std::string_view>& lines_;
  std::string current_;
  size_t next_ = 0;
};

// Text that trips up tokenizers: runs of spaces, tabs, blank lines, leading
// and trailing spaces, non-ASCII, a control byte and SentencePiece's own
// space symbol.
constexpr std::string_view kProbe =
    "  Two leading spaces,\ta tab,   three spaces\n\n\nnaïve café — 日本語 😀 \x01\r\n"
    "\xE2\x96\x81 lower block, trailing space \n";

}  // namespace

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  require_regular_file(path, "tokenizer model");
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "tokenizer model '%s' cannot be opened", path.c_str());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_USER_CHECK(!in.bad() && !bytes.empty(), "tokenizer model '%s' could not be read or is empty", path.c_str());
  return from_model(std::move(bytes), path);
}

Tokenizer Tokenizer::from_model(std::string model_bytes, const std::string& origin) {
  Tokenizer t;
  auto status = t.sp_->LoadFromSerializedProto(model_bytes);
  LOOM_USER_CHECK(status.ok(), "tokenizer model '%s' is not a SentencePiece model: %s", origin.c_str(),
                  status.ToString().c_str());
  t.model_ = std::move(model_bytes);
  t.model_hash_ = content_hash(t.model_);
  LOOM_USER_CHECK(t.sp_->eos_id() >= 0, "tokenizer model '%s' has no end-of-text (eos) piece", origin.c_str());
  const int unk = t.sp_->unk_id();
  auto id_of = [&](const std::string& piece) {
    int id = t.sp_->PieceToId(piece);
    return id == unk ? -1 : id;
  };
  t.newline_id_ = id_of("\n");
  if (t.newline_id_ < 0) t.newline_id_ = id_of("<0x0A>");
  LOOM_USER_CHECK(t.newline_id_ >= 0, "tokenizer model '%s' cannot represent a newline (no \"\\n\" piece, no byte fallback)",
                  origin.c_str());
  for (int k = 0; k < 3; k++) t.lower_block_ids_[k] = id_of(strprintf("<0x%02X>", unsigned(uint8_t(kLowerBlock[k]))));
  std::vector<int32_t> ids;
  t.encode(kProbe, &ids);
  LOOM_USER_CHECK(t.decode(ids) == kProbe,
                  "tokenizer model '%s' does not give back text byte for byte (it needs byte fallback, identity "
                  "normalization and no whitespace folding, as `loom prepare` trains)",
                  origin.c_str());
  return t;
}

std::string Tokenizer::train(const std::vector<std::string_view>& lines, int vocab_size, const std::string& origin) {
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},  // the rarest characters become byte tokens
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},  // indentation
      {"split_digits", "true"},
      {"user_defined_symbols", "\n"},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      {"input_sentence_size", "0"},  // the caller samples
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "16384"},
      // The model file records the thread count, so it is fixed to keep the
      // file the same on every machine. BPE training is mostly serial anyway.
      {"num_threads", "2"},
      {"minloglevel", "1"},
  };
  LineIterator it(lines);
  std::string model;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  LOOM_USER_CHECK(status.ok(), "training the tokenizer on '%s' (vocabulary %d) failed: %s", origin.c_str(), vocab_size,
                  status.ToString().c_str());
  return model;
}

void Tokenizer::encode_line(std::string_view line, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  for (;;) {
    size_t at = line.find(kLowerBlock);
    sp_->Encode(line.substr(0, at), &ids);
    out->insert(out->end(), ids.begin(), ids.end());
    if (at == std::string_view::npos) return;
    // SentencePiece would read U+2581 as a space: spell it as bytes.
    if (lower_block_ids_[0] >= 0) out->insert(out->end(), lower_block_ids_, lower_block_ids_ + 3);
    line.remove_prefix(at + kLowerBlock.size());
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  for (;;) {
    size_t nl = text.find('\n');
    encode_line(text.substr(0, nl), out);
    if (nl == std::string_view::npos) return;
    out->push_back(newline_id_);
    text.remove_prefix(nl + 1);
  }
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::vector<int> v(ids, ids + n);
  std::string text;
  auto status = sp_->Decode(v, &text);
  LOOM_CHECK(status.ok(), "decode: %s", status.ToString().c_str());
  return text;
}

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }

}  // namespace loom
