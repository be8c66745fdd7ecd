#include "comm/broadcast_text.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace loom {

std::string broadcast_text(Communicator& group, const std::string& text, int root) {
  // The length travels as an fp32 (exact below 2^24 bytes), the bytes as
  // 16-bit words (a broadcast copies them untouched).
  float length = float(text.size());
  group.broadcast(&length, 1, DType::f32, root);
  std::vector<uint16_t> words((size_t(length) + 1) / 2, 0);
  // (An empty text has no words: memcpy may not be given their null pointer.)
  if (group.rank() == root && !text.empty()) std::memcpy(words.data(), text.data(), text.size());
  if (!words.empty()) group.broadcast(words.data(), words.size(), DType::bf16, root);
  return std::string(reinterpret_cast<const char*>(words.data()), size_t(length));
}

}  // namespace loom
