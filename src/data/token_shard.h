// Token shards: the binary files `loom prepare` writes and the loader maps.
//
// A shard is a 64-byte header followed by token ids, little-endian, uint16
// when the vocabulary fits in 16 bits, else uint32. Documents inside a shard
// are each followed by the end-of-text id; a document never straddles two
// shards. The header names the tokenizer (a hash of its model file) and the
// prepare run (dataset_id), so that shards and tokenizers that do not belong
// together are caught when the data is opened.
//
// Version 2 (instruction and chat data, `loom prepare` on JSON Lines) adds,
// after the ids, a target mask: ceil(token_count / 8) bytes, bit i (byte
// i / 8, bit i % 8) set when token i is learned from, i.e. is a target where
// it is predicted (a completion's or an assistant turn's tokens and its
// end-of-turn token; prompts, system and user turns are not); then where
// each sample starts: document_count uint64 offsets, the first 0, rising
// (a version 2 "document" is one sample). Plain text is written as version
// 1, every token a target; both versions are read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

struct ShardHeader {
  char magic[8];             // "LOOMTOK\0"
  uint32_t version;          // kShardVersion
  uint32_t token_bytes;      // 2 (uint16) or 4 (uint32)
  uint64_t token_count;      // tokens after the header
  uint64_t document_count;
  uint32_t vocab_size;       // every id is below this
  uint32_t eos_id;
  uint64_t tokenizer_hash;   // content_hash of the tokenizer model file
  uint64_t dataset_id;       // the same for every shard of one prepare run
  uint64_t reserved;
};
static_assert(sizeof(ShardHeader) == 64, "the on-disk header is 64 bytes");

constexpr char kShardMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '\0'};
constexpr uint32_t kShardVersion = 1;        // ids only
constexpr uint32_t kMaskedShardVersion = 2;  // ids, then the target mask

// Bytes per token for a vocabulary: 2 if every id fits in uint16, else 4.
inline uint32_t token_bytes_for(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// Writes a shard atomically (temporary name, fsync, rename). Fills magic,
// version, token_bytes and token_count of `header` from the arguments.
// target_mask (one byte per token, 0 or 1; nullptr: every token a target)
// makes it version 2, with sample_starts (header.document_count of them).
void write_shard(const std::string& path, ShardHeader header, const int32_t* tokens, size_t count,
                 const uint8_t* target_mask = nullptr, const uint64_t* sample_starts = nullptr);

// A shard mapped read-only. The constructor checks the header and the size
// of the body and throws UserError naming the file if anything is wrong.
class ShardFile {
 public:
  explicit ShardFile(const std::string& path);
  ~ShardFile();
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&&) = delete;
  ShardFile(const ShardFile&) = delete;

  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return header_.token_count; }

  // out[i] = token(begin + i) for i < n.
  void read(uint64_t begin, size_t n, int32_t* out) const;
  bool has_mask() const { return header_.version == kMaskedShardVersion; }
  // out[i] = 1 if token begin + i is a target (always 1 without a mask).
  void read_mask(uint64_t begin, size_t n, uint8_t* out) const;
  // Version 2: where sample k starts, and its length (k < document_count).
  uint64_t sample_start(uint64_t k) const;
  uint64_t sample_length(uint64_t k) const;
  // Throws UserError naming the file and position of the first id >= vocab_size.
  void check_ids_below(uint32_t vocab_size) const;

 private:
  // The header's checks (UserError naming the file); sets mask_ / starts_.
  void check_header(const std::string& path, size_t bytes);

  std::string path_;
  ShardHeader header_{};
  const uint8_t* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;  // map_ + 64
  const uint8_t* mask_ = nullptr; // after the ids (version 2)
  const uint8_t* starts_ = nullptr;  // after the mask (version 2): uint64 each, unaligned
};

}  // namespace loom
