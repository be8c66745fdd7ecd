#include "data/chat_template.h"

#include "core/check.h"

namespace loom {
namespace {

// Python's str.strip() for the ASCII whitespace chat text carries.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

void add(std::vector<ChatSegment>& out, std::string text, bool target) {
  if (!text.empty()) out.push_back({std::move(text), target});
}

std::vector<ChatSegment> chatml(const std::vector<ChatMessage>& m, const std::string& default_system) {
  std::vector<ChatSegment> out;
  for (size_t i = 0; i < m.size(); i++) {
    if (i == 0 && m[0].role != "system" && !default_system.empty())
      add(out, "<|im_start|>system\n" + default_system + "<|im_end|>\n", false);
    const bool learn = m[i].role == "assistant";
    add(out, "<|im_start|>" + m[i].role + "\n", false);
    add(out, m[i].content + "<|im_end|>", learn);
    add(out, "\n", false);
  }
  return out;
}

// Llama 3's turns; llama31 puts its system header first.
std::vector<ChatSegment> llama3(const std::vector<ChatMessage>& m, const std::string& bos, bool llama31) {
  std::vector<ChatSegment> out;
  size_t first = 0;
  add(out, bos, false);
  if (llama31) {
    std::string system;
    if (!m.empty() && m[0].role == "system") system = strip(m[0].content), first = 1;
    add(out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
             "2024\n\n" + system + "<|eot_id|>",
        false);
  }
  for (size_t i = first; i < m.size(); i++) {
    const bool learn = m[i].role == "assistant";
    add(out, "<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n", false);
    add(out, strip(m[i].content) + "<|eot_id|>", learn);
  }
  return out;
}

// Llama 2 and Mistral: user and assistant alternate, user first.
void check_alternation(const std::vector<ChatMessage>& m, size_t first) {
  for (size_t i = first; i < m.size(); i++) {
    const bool user_turn = (i - first) % 2 == 0;
    LOOM_USER_CHECK(m[i].role == (user_turn ? "user" : "assistant"),
                    "message %zu is '%s': this template needs user and assistant turns alternating, user first%s", i,
                    m[i].role.c_str(), first ? " (after one system turn)" : "");
  }
}

std::vector<ChatSegment> llama2(const std::vector<ChatMessage>& m, const std::string& bos, const std::string& eos) {
  std::vector<ChatSegment> out;
  const bool system = !m.empty() && m[0].role == "system";
  check_alternation(m, system ? 1 : 0);
  for (size_t i = system ? 1 : 0; i < m.size(); i++) {
    std::string content = m[i].content;
    if (i == (system ? 1u : 0u) && system) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + content;
    if (m[i].role == "user") add(out, bos + "[INST] " + strip(content) + " [/INST]", false);
    else add(out, " " + strip(content) + " " + eos, true);
  }
  return out;
}

// Mistral 7B Instruct's template as v0.1 and v0.2 serve it since mid-2024: an
// optional system turn put before the first user turn.
std::vector<ChatSegment> mistral(const std::vector<ChatMessage>& m, const std::string& bos, const std::string& eos) {
  const bool system = !m.empty() && m[0].role == "system";
  check_alternation(m, system ? 1 : 0);
  std::vector<ChatSegment> out;
  add(out, bos, false);
  for (size_t i = system ? 1 : 0; i < m.size(); i++) {
    if (m[i].role == "user") {
      const std::string sys = i == 1 && system ? m[0].content + "\n\n" : "";
      add(out, " [INST] " + sys + m[i].content + " [/INST]", false);
    } else {
      add(out, " " + m[i].content + eos, true);
    }
  }
  return out;
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::llama3: return "llama3";
    case ChatTemplate::llama31: return "llama31";
    case ChatTemplate::llama2: return "llama2";
    case ChatTemplate::mistral: return "mistral";
  }
  return "?";
}

std::optional<ChatTemplate> parse_chat_template(const std::string& name) {
  for (ChatTemplate t : {ChatTemplate::chatml, ChatTemplate::llama3, ChatTemplate::llama31, ChatTemplate::llama2,
                         ChatTemplate::mistral})
    if (name == chat_template_name(t)) return t;
  return std::nullopt;
}

std::optional<ChatTemplate> recognise_chat_template(const std::string& jinja) {
  auto has = [&](const char* s) { return jinja.find(s) != std::string::npos; };
  if (has("<|im_start|>")) return ChatTemplate::chatml;
  if (has("<|start_header_id|>")) {
    if (!has("Cutting Knowledge Date")) return ChatTemplate::llama3;
    // Llama 3.1 dates its system header 26 Jul 2024 unless told; Llama
    // 3.2's asks for today's date (strftime_now), which loom does not render.
    return has("strftime_now") ? std::nullopt : std::optional(ChatTemplate::llama31);
  }
  if (has("<<SYS>>")) return ChatTemplate::llama2;
  if (has("[INST]")) return ChatTemplate::mistral;
  return std::nullopt;
}

std::string generation_prompt(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml: return "<|im_start|>assistant\n";
    case ChatTemplate::llama3:
    case ChatTemplate::llama31: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    default: return "";
  }
}

std::string end_of_turn(ChatTemplate t, const std::string& eos) {
  switch (t) {
    case ChatTemplate::chatml: return "<|im_end|>";
    case ChatTemplate::llama3:
    case ChatTemplate::llama31: return "<|eot_id|>";
    default: return eos;
  }
}

std::string chatml_default_system(const std::string& jinja) {
  for (const char* head : {"<|im_start|>system\n", "<|im_start|>system\\n"})
    for (size_t at = jinja.find(head); at != std::string::npos; at = jinja.find(head, at + 1)) {
      const size_t begin = at + std::string(head).size(), end = jinja.find("<|im_end|>", begin);
      if (end == std::string::npos) continue;
      const std::string text = jinja.substr(begin, end - begin);
      // A literal (no quote: not the rendering of a message's content).
      if (text.find_first_of("'\"{}+") == std::string::npos) return text;
    }
  return "";
}

std::vector<ChatSegment> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages, const std::string& bos,
                                     const std::string& eos, const std::string& chatml_system) {
  for (size_t i = 0; i < messages.size(); i++) {
    const std::string& r = messages[i].role;
    LOOM_USER_CHECK(r == "system" || r == "user" || r == "assistant",
                    "message %zu has role '%s' (system, user or assistant)", i, r.c_str());
  }
  switch (t) {
    case ChatTemplate::chatml: return chatml(messages, chatml_system);
    case ChatTemplate::llama3: return llama3(messages, bos, false);
    case ChatTemplate::llama31: return llama3(messages, bos, true);
    case ChatTemplate::llama2: return llama2(messages, bos, eos);
    case ChatTemplate::mistral: return mistral(messages, bos, eos);
  }
  return {};
}

}  // namespace loom
