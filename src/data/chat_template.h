// Conversations rendered as the chat templates of the families loom imports
// render them, in segments that say which text is learned from: an
// assistant turn's content and its end-of-turn token are targets; system and
// user turns and the headers around each turn are not.
//
//   chatml   Qwen2 (ChatML): <|im_start|>ROLE\nCONTENT<|im_end|>\n, the
//            template's default system turn (Qwen2: "You are a helpful
//            assistant.") when none is given.
//   llama3   Llama 3 Instruct: BOS, then <|start_header_id|>ROLE<|end_header_id|>\n\n
//            CONTENT(trimmed)<|eot_id|> per turn.
//   llama31  Llama 3.1 Instruct: Llama 3's turns after a system header that
//            always carries "Cutting Knowledge Date: December 2023" and
//            "Today Date: 26 Jul 2024" (the template's defaults), then the
//            system prompt, if any.
//   llama2   Llama 2 chat: BOS [INST] (<<SYS>>\nSYSTEM\n<</SYS>>\n\n)USER [/INST] ASSISTANT EOS
//            per exchange (contents stripped).
//   mistral  Mistral 7B Instruct v0.1 / v0.2 as served since mid-2024: BOS, then
//             [INST] (SYSTEM\n\n)USER [/INST] ASSISTANT EOS per exchange (the
//            original one-line v0.1 / v0.2 templates, without the leading spaces,
//            are not built in).
// Each is checked token for token against transformers' apply_chat_template
// with the family's published template text (tests/data/chat_template_test.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class ChatTemplate { chatml, llama3, llama31, llama2, mistral };
const char* chat_template_name(ChatTemplate t);
std::optional<ChatTemplate> parse_chat_template(const std::string& name);
// The built-in template a tokenizer_config.json's chat_template text is, by
// the markers it holds; nullopt when it is none of them, or when it renders
// something loom's renderer does not (Llama 3.2's: today's date).
std::optional<ChatTemplate> recognise_chat_template(const std::string& jinja);
// ChatML: the system turn a template adds when a conversation has none (a
// literal '<|im_start|>system\n...<|im_end|>' in it: Qwen2's "You are a
// helpful assistant.", Qwen2.5's "You are Qwen, created by Alibaba Cloud. ...");
// "" when it adds none.
std::string chatml_default_system(const std::string& jinja);
constexpr const char* kQwen2DefaultSystem = "You are a helpful assistant.";

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatSegment {
  std::string text;
  bool target = false;
};

// The conversation rendered (no generation prompt). bos / eos: the
// tokenizer's token texts. Throws UserError (message without a location: the
// caller adds the file and line) for what the template refuses: roles out of
// order, a system turn where the template has none.
// chatml_system: the system turn ChatML adds when there is none ("": none).
std::vector<ChatSegment> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages, const std::string& bos,
                                     const std::string& eos, const std::string& chatml_system = kQwen2DefaultSystem);
// What add_generation_prompt appends (the assistant's header; nothing for
// llama2 and mistral, whose user turn ends with [/INST]), and the token an
// assistant turn ends with (<|im_end|>, <|eot_id|>, or eos).
std::string generation_prompt(ChatTemplate t);
std::string end_of_turn(ChatTemplate t, const std::string& eos);

}  // namespace loom
