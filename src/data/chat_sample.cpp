#include "data/chat_sample.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom {

ChatSampleText chat_sample_segments(std::string_view line, const std::string& file, uint64_t line_no,
                                    const ChatFormat& format) {
  using Json = nlohmann::json;
  // FILE:LINE for messages, made only when one is thrown (LOOM_USER_CHECK
  // formats its message then).
  struct Where {
    const std::string& file;
    uint64_t line;
    std::string text;
    const char* c_str() { return (text = file + ":" + std::to_string(line)).c_str(); }
  } where{file, line_no, {}};
  Json j;
  try {
    j = Json::parse(line.begin(), line.end());
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", where.c_str(), e.what()));
  }
  LOOM_USER_CHECK(j.is_object(), "%s: expected a JSON object", where.c_str());
  // The field's string, moved out of the parsed line.
  auto text = [&](Json& at, const char* key, const auto& field) {
    const auto it = at.find(key);
    LOOM_USER_CHECK(it != at.end(), "%s: field '%s' is missing", where.c_str(), std::string(field).c_str());
    LOOM_USER_CHECK(it->is_string(), "%s: field '%s' must be a string", where.c_str(), std::string(field).c_str());
    return std::move(it->template get_ref<std::string&>());
  };
  if (j.contains("messages")) {
    LOOM_USER_CHECK(!j.contains("prompt") && !j.contains("completion"),
                    "%s: a line has either 'messages' or 'prompt' and 'completion', not both", where.c_str());
    LOOM_USER_CHECK(format.chat_template.has_value(),
                    "%s: field 'messages' needs a chat template: the tokenizer has no chat_template loom recognises "
                    "(give loom prepare --chat-template NAME)",
                    where.c_str());
    Json& m = j.at("messages");
    LOOM_USER_CHECK(m.is_array() && !m.empty(), "%s: field 'messages' must be a non-empty array", where.c_str());
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < m.size(); i++) {
      const std::string field = "messages[" + std::to_string(i) + "]";
      LOOM_USER_CHECK(m[i].is_object(), "%s: field '%s' must be an object", where.c_str(), field.c_str());
      std::string role = text(m[i], "role", field + ".role");
      messages.push_back({std::move(role), text(m[i], "content", field + ".content")});
      const std::string& r = messages.back().role;
      LOOM_USER_CHECK(r == "system" || r == "user" || r == "assistant",
                      "%s: field 'messages': message %zu has role '%s' (system, user or assistant)", where.c_str(), i,
                      r.c_str());
    }
    LOOM_USER_CHECK(messages.back().role == "assistant",
                    "%s: field 'messages' ends with a '%s' turn: a conversation must end with an assistant turn "
                    "(what follows the last answer teaches nothing)",
                    where.c_str(), messages.back().role.c_str());
    try {
      return {render_chat(*format.chat_template, messages, format.bos, format.eos, format.chatml_system), false};
    } catch (const UserError& e) {
      throw UserError(strprintf("%s: field 'messages': %s", where.c_str(), e.what()));
    }
  }
  std::string prompt = text(j, "prompt", "prompt"), completion = text(j, "completion", "completion");
  LOOM_USER_CHECK(!completion.empty(), "%s: field 'completion' is empty", where.c_str());
  ChatSampleText out;
  out.wrap = true;
  if (!prompt.empty()) out.segments.push_back({std::move(prompt), false});
  out.segments.push_back({std::move(completion), true});
  return out;
}

}  // namespace loom
