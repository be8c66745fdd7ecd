#include "data/chat_sample.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom {

ChatSampleText chat_sample_segments(const std::string& line, const std::string& where, const ChatFormat& format) {
  using Json = nlohmann::json;
  Json j;
  try {
    j = Json::parse(line);
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", where.c_str(), e.what()));
  }
  LOOM_USER_CHECK(j.is_object(), "%s: expected a JSON object", where.c_str());
  auto text = [&](const Json& at, const char* key, const std::string& field) {
    LOOM_USER_CHECK(at.contains(key), "%s: field '%s' is missing", where.c_str(), field.c_str());
    LOOM_USER_CHECK(at.at(key).is_string(), "%s: field '%s' must be a string", where.c_str(), field.c_str());
    return at.at(key).get<std::string>();
  };
  if (j.contains("messages")) {
    LOOM_USER_CHECK(!j.contains("prompt") && !j.contains("completion"),
                    "%s: a line has either 'messages' or 'prompt' and 'completion', not both", where.c_str());
    LOOM_USER_CHECK(format.chat_template.has_value(),
                    "%s: field 'messages' needs a chat template: the tokenizer has no chat_template loom recognises "
                    "(give loom prepare --chat-template NAME)",
                    where.c_str());
    const Json& m = j.at("messages");
    LOOM_USER_CHECK(m.is_array() && !m.empty(), "%s: field 'messages' must be a non-empty array", where.c_str());
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < m.size(); i++) {
      const std::string field = "messages[" + std::to_string(i) + "]";
      LOOM_USER_CHECK(m[i].is_object(), "%s: field '%s' must be an object", where.c_str(), field.c_str());
      messages.push_back({text(m[i], "role", field + ".role"), text(m[i], "content", field + ".content")});
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
  const std::string prompt = text(j, "prompt", "prompt"), completion = text(j, "completion", "completion");
  LOOM_USER_CHECK(!completion.empty(), "%s: field 'completion' is empty", where.c_str());
  ChatSampleText out;
  out.wrap = true;
  if (!prompt.empty()) out.segments.push_back({prompt, false});
  out.segments.push_back({completion, true});
  return out;
}

}  // namespace loom
