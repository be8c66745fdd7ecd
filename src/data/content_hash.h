// A fast 64-bit hash of bytes, to tell whether inputs changed (prepare's
// stamps) and which tokenizer a shard was made with. Not cryptographic:
// it detects accidents, not adversaries. Stable across runs and machines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

// Feeds are not concatenated: add(a).add(b) differs from add(a + b).
class ContentHash {
 public:
  ContentHash& add(const void* data, size_t bytes);
  ContentHash& add(std::string_view s) { return add_sized(s.data(), s.size()); }
  ContentHash& add(uint64_t v) { return add(&v, sizeof v); }
  uint64_t value() const;

 private:
  // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
  ContentHash& add_sized(const void* data, size_t bytes) {
    add(uint64_t(bytes));
    return add(data, bytes);
  }
  uint64_t state_ = 0x6a09e667f3bcc908ull;
  uint64_t length_ = 0;
};

inline uint64_t content_hash(std::string_view bytes) { return ContentHash().add(bytes).value(); }
// 16 lowercase hex digits.
std::string hash_hex(uint64_t h);

}  // namespace loom
