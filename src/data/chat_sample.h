// One line of instruction or chat data (JSON Lines) as text segments, the
// learned ones marked:
//   {"prompt": P, "completion": C}      -> P | C, to be wrapped in the
//                                          tokenizer's [BOS] and EOS ids (C and EOS learned)
//   {"messages": [{"role", "content"}, ...]} -> the chat template's rendering
//                                          (assistant turns learned)
// A conversation must end with an assistant turn (a trailing prompt teaches
// nothing: refused), a completion must not be empty; other fields are
// ignored. Errors are UserErrors naming `where` ("FILE:LINE") and the field.
#pragma once

#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"

namespace loom {

struct ChatFormat {
  std::optional<ChatTemplate> chat_template;  // none: "messages" lines are refused
  std::string bos, eos;                       // the tokenizer's token texts ("" for no BOS)
  std::string chatml_system = kQwen2DefaultSystem;  // ChatML's default system turn ("": none)
};

struct ChatSampleText {
  std::vector<ChatSegment> segments;
  bool wrap = false;  // prompt / completion: BOS before, EOS (learned) after
};

// `file` and `line_no` name the line in messages (FILE:LINE), built only
// when one is thrown: prepare reads millions of lines.
ChatSampleText chat_sample_segments(std::string_view line, const std::string& file, uint64_t line_no,
                                    const ChatFormat& format);

}  // namespace loom
